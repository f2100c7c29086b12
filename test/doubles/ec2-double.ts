/**
 * A local stand-in for the part of the Amazon EC2 Query API denv uses (DescribeImages,
 * RunInstances, DescribeInstances, TerminateInstances), on loopback: form-encoded POSTs, answers in
 * EC2's XML, errors in its <Response><Errors> shape. It checks that each request is signed (AWS
 * Signature Version 4) with the expected access key for the expected region and service (the
 * signature itself is not recomputed), records every call, and keeps the instances it was asked
 * for, with their user data and tags. It boots nothing: a test plays the machine.
 */
import { createServer, type Server } from "node:http";

export interface Ec2Instance {
  id: string;
  imageId: string;
  instanceType: string;
  userData: string;
  tags: Record<string, string>;
  state: "pending" | "running" | "shutting-down" | "terminated";
}

const xml = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const NS = 'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"';

export class Ec2Double {
  readonly accessKeyId: string;
  readonly region: string;
  readonly instances = new Map<string, Ec2Instance>();
  readonly calls: { action: string; params: URLSearchParams }[] = [];
  /** The next RunInstances answers this error. */
  failNextRun: { status: number; code: string; message: string } | null = null;
  private server: Server | null = null;
  url = "";
  private seq = 0;

  constructor(options: { accessKeyId: string; region: string }) {
    this.accessKeyId = options.accessKeyId;
    this.region = options.region;
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        const answer = this.answer(req.headers.authorization ?? "", body);
        res.writeHead(answer.status, { "content-type": "text/xml;charset=UTF-8" });
        res.end(answer.body);
      });
    });
    await new Promise<void>((r) => this.server?.listen(0, "127.0.0.1", r));
    const port = (this.server.address() as { port: number }).port;
    this.url = `http://127.0.0.1:${port}`;
    return this.url;
  }

  close(): Promise<void> {
    return new Promise((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  private error(status: number, code: string, message: string) {
    return {
      status,
      body: `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${xml(code)}</Code><Message>${xml(message)}</Message></Error></Errors><RequestID>req-${this.seq++}</RequestID></Response>`,
    };
  }

  private answer(authorization: string, body: string): { status: number; body: string } {
    // AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/ec2/aws4_request, SignedHeaders=…, Signature=…
    const m =
      /^AWS4-HMAC-SHA256 Credential=([^/]+)\/\d{8}\/([^/]+)\/ec2\/aws4_request, SignedHeaders=[^,]+, Signature=[0-9a-f]{64}$/.exec(
        authorization,
      );
    if (!m || m[1] !== this.accessKeyId)
      return this.error(401, "AuthFailure", "AWS was not able to validate the provided access credentials");
    if (m[2] !== this.region)
      return this.error(401, "AuthFailure", `credential scope is ${m[2]}, not ${this.region}`);
    const params = new URLSearchParams(body);
    const action = params.get("Action") ?? "";
    this.calls.push({ action, params });
    const rid = `<requestId>req-${this.seq++}</requestId>`;
    if (action === "DescribeImages") {
      const owner = params.get("Owner.1");
      const nameFilter = [...params.entries()].find(
        ([k, v]) => /^Filter\.\d+\.Name$/.test(k) && v === "name",
      );
      const pattern = nameFilter ? (params.get(nameFilter[0].replace("Name", "Value.1")) ?? "*") : "*";
      const images =
        owner === "136693071363"
          ? [
              {
                id: "ami-0old0000000000000",
                name: pattern.replace("*", "20250101-1"),
                at: "2025-01-01T00:00:00.000Z",
              },
              {
                id: "ami-0new0000000000000",
                name: pattern.replace("*", "20261101-2"),
                at: "2026-11-01T00:00:00.000Z",
              },
            ]
          : [];
      return {
        status: 200,
        body: `<DescribeImagesResponse ${NS}>${rid}<imagesSet>${images
          .map(
            (i) =>
              `<item><imageId>${i.id}</imageId><name>${xml(i.name)}</name><creationDate>${i.at}</creationDate><imageState>available</imageState></item>`,
          )
          .join("")}</imagesSet></DescribeImagesResponse>`,
      };
    }
    if (action === "RunInstances") {
      if (this.failNextRun) {
        const f = this.failNextRun;
        this.failNextRun = null;
        return this.error(f.status, f.code, f.message);
      }
      const tags: Record<string, string> = {};
      for (let i = 1; params.has(`TagSpecification.1.Tag.${i}.Key`); i++)
        tags[params.get(`TagSpecification.1.Tag.${i}.Key`) as string] =
          params.get(`TagSpecification.1.Tag.${i}.Value`) ?? "";
      const inst: Ec2Instance = {
        id: `i-0${(this.seq++).toString(16).padStart(16, "0")}`,
        imageId: params.get("ImageId") ?? "",
        instanceType: params.get("InstanceType") ?? "",
        userData: Buffer.from(params.get("UserData") ?? "", "base64").toString("utf8"),
        tags,
        state: "pending",
      };
      this.instances.set(inst.id, inst);
      return {
        status: 200,
        body: `<RunInstancesResponse ${NS}>${rid}<reservationId>r-0${this.seq}</reservationId><ownerId>123456789012</ownerId><instancesSet><item><instanceId>${inst.id}</instanceId><imageId>${xml(inst.imageId)}</imageId><instanceState><code>0</code><name>pending</name></instanceState><instanceType>${xml(inst.instanceType)}</instanceType></item></instancesSet></RunInstancesResponse>`,
      };
    }
    if (action === "DescribeInstances") {
      const filters: [string, string][] = [];
      for (let i = 1; params.has(`Filter.${i}.Name`); i++)
        filters.push([params.get(`Filter.${i}.Name`) as string, params.get(`Filter.${i}.Value.1`) ?? ""]);
      const match = (inst: Ec2Instance) =>
        filters.every(([name, value]) =>
          name === "tag-key"
            ? value in inst.tags
            : name.startsWith("tag:")
              ? inst.tags[name.slice(4)] === value
              : true,
        );
      const items = [...this.instances.values()].filter(match);
      return {
        status: 200,
        body: `<DescribeInstancesResponse ${NS}>${rid}<reservationSet>${items
          .map(
            (i) =>
              `<item><reservationId>r-0</reservationId><instancesSet><item><instanceId>${i.id}</instanceId><instanceState><code>16</code><name>${i.state}</name></instanceState><tagSet>${Object.entries(
                i.tags,
              )
                .map(([k, v]) => `<item><key>${xml(k)}</key><value>${xml(v)}</value></item>`)
                .join("")}</tagSet></item></instancesSet></item>`,
          )
          .join("")}</reservationSet></DescribeInstancesResponse>`,
      };
    }
    if (action === "TerminateInstances") {
      const id = params.get("InstanceId.1") ?? "";
      const inst = this.instances.get(id);
      if (!inst)
        return this.error(400, "InvalidInstanceID.NotFound", `The instance ID '${id}' does not exist`);
      inst.state = "terminated";
      return {
        status: 200,
        body: `<TerminateInstancesResponse ${NS}>${rid}<instancesSet><item><instanceId>${id}</instanceId><currentState><code>32</code><name>shutting-down</name></currentState><previousState><code>16</code><name>running</name></previousState></item></instancesSet></TerminateInstancesResponse>`,
      };
    }
    return this.error(400, "InvalidAction", `The action ${action} is not valid for this web service`);
  }
}
