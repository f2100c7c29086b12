/**
 * The part of Amazon EC2 denv uses to create hosts, through AWS's own SDK (`@aws-sdk/client-ec2`):
 * find Debian 12's newest image, run an instance of it with cloud-init user data and tags, read
 * it, terminate it, list by tag. Tested against a local double of the EC2 Query API the tests start
 * on loopback (test/e2e/aws-provision.test.ts); it has not run against AWS itself.
 *
 * The credentials are the team's key pair (`ACCESS_KEY_ID:SECRET_ACCESS_KEY`, sealed at rest), given
 * to the client explicitly: nothing of the server's own environment (AWS_* variables, ~/.aws) is
 * read, and the endpoint is set, so no configured endpoint URL can send the team's key elsewhere.
 */
import type { EC2Client } from "@aws-sdk/client-ec2";
import { DenvError } from "@denv/protocol";
import type { CloudServer, MachineDriver } from "./machine-driver.ts";

type Ec2Sdk = typeof import("@aws-sdk/client-ec2");
interface Ec2 {
  sdk: Ec2Sdk;
  client: EC2Client;
}

/**
 * The SDK, loaded on first use: importing it adds ≈ 90 MiB to a process's memory, which a server
 * that never provisions on AWS should not carry (it was a third of the server's memory at rest).
 */
let sdkLoading: Promise<Ec2Sdk> | undefined;
function loadSdk(): Promise<Ec2Sdk> {
  sdkLoading ??= import("@aws-sdk/client-ec2");
  return sdkLoading;
}

/** Debian's own AWS account, which publishes its official images. */
export const DEBIAN_IMAGE_OWNER = "136693071363";

/** The team's key pair, as it is connected: `ACCESS_KEY_ID:SECRET_ACCESS_KEY`. */
export function splitAwsToken(token: string): { accessKeyId: string; secretAccessKey: string } {
  const at = token.indexOf(":");
  const accessKeyId = at > 0 ? token.slice(0, at) : "";
  const secretAccessKey = at > 0 ? token.slice(at + 1) : "";
  if (!/^[A-Z0-9]{16,128}$/.test(accessKeyId) || secretAccessKey.length < 16 || /\s/.test(secretAccessKey))
    throw new DenvError(
      "invalid_argument",
      "an AWS token is ACCESS_KEY_ID:SECRET_ACCESS_KEY (or give --profile NAME to read them from ~/.aws/credentials)",
    );
  return { accessKeyId, secretAccessKey };
}

/** Instance families on Graviton (arm64): their image is Debian's arm64 one. */
function archOf(instanceType: string): "amd64" | "arm64" {
  const family = instanceType.split(".")[0] ?? "";
  return /^[a-z]+\d+[a-z]*g[a-z]*$/.test(family) ? "arm64" : "amd64";
}

export class AwsError extends DenvError {
  constructor(err: unknown, what: string) {
    const e = err as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
    const status = e.$metadata?.httpStatusCode ?? 0;
    const code = (e.name ?? "Error").slice(0, 64);
    super(
      status === 401 ||
        status === 403 ||
        /AuthFailure|UnauthorizedOperation|InvalidClientTokenId|SignatureDoesNotMatch/.test(code)
        ? "forbidden"
        : /NotFound/.test(code)
          ? "not_found"
          : "unavailable",
      `AWS refused ${what}: ${code}${e.message ? `: ${e.message.slice(0, 300)}` : ""}`,
      { details: { provider: "aws", provider_code: code, status } },
    );
  }
}

export class AwsDriver implements MachineDriver {
  private readonly region: string;
  private readonly credentials: { accessKeyId: string; secretAccessKey: string };
  private readonly endpoint: string;
  private ec2: Promise<Ec2> | undefined;

  constructor(options: { token: string; region: string; apiUrl?: string | null }) {
    if (!/^[a-z]{2}(-[a-z]+)+-\d$/.test(options.region))
      throw new DenvError(
        "invalid_argument",
        `location: ${options.region.slice(0, 64)} is not an AWS region (e.g. eu-central-1)`,
      );
    this.region = options.region;
    this.credentials = splitAwsToken(options.token);
    this.endpoint = options.apiUrl ?? `https://ec2.${options.region}.amazonaws.com`;
  }

  private client(): Promise<Ec2> {
    this.ec2 ??= loadSdk().then((sdk) => ({
      sdk,
      client: new sdk.EC2Client({
        region: this.region,
        credentials: this.credentials,
        endpoint: this.endpoint,
        ignoreConfiguredEndpointUrls: true,
        maxAttempts: 2,
      }),
    }));
    return this.ec2;
  }

  private async send<T>(what: string, fn: (ec2: Ec2) => Promise<T>): Promise<T> {
    const ec2 = await this.client();
    try {
      return await fn(ec2);
    } catch (err) {
      if (err instanceof DenvError) throw err;
      throw new AwsError(err, what);
    }
  }

  /** The newest Debian 12 image for the instance type's architecture, in the region. */
  private async debianImage(instanceType: string): Promise<string> {
    const r = await this.send("DescribeImages", ({ sdk, client }) =>
      client.send(
        new sdk.DescribeImagesCommand({
          Owners: [DEBIAN_IMAGE_OWNER],
          Filters: [
            { Name: "name", Values: [`debian-12-${archOf(instanceType)}-*`] },
            { Name: "state", Values: ["available"] },
          ],
        }),
      ),
    );
    const newest = [...(r.Images ?? [])]
      .filter((i) => i.ImageId)
      .sort((a, b) => (b.CreationDate ?? "").localeCompare(a.CreationDate ?? ""))[0];
    if (!newest?.ImageId)
      throw new DenvError("unavailable", `AWS has no Debian 12 image in ${this.region} for ${instanceType}`);
    return newest.ImageId;
  }

  async createServer(o: {
    name: string;
    serverType: string;
    location: string;
    image: string;
    userData: string;
    labels: Record<string, string>;
  }): Promise<CloudServer> {
    const image = await this.debianImage(o.serverType);
    const tags = [
      { Key: "Name", Value: o.name },
      ...Object.entries(o.labels).map(([Key, Value]) => ({ Key, Value })),
    ];
    const r = await this.send("RunInstances", ({ sdk, client }) =>
      client.send(
        new sdk.RunInstancesCommand({
          ImageId: image,
          InstanceType: o.serverType as never,
          MinCount: 1,
          MaxCount: 1,
          UserData: Buffer.from(o.userData).toString("base64"),
          TagSpecifications: [{ ResourceType: "instance", Tags: tags }],
        }),
      ),
    );
    const i = r.Instances?.[0];
    if (!i?.InstanceId) throw new DenvError("unavailable", "AWS answered RunInstances with no instance");
    return { id: i.InstanceId, name: o.name, status: i.State?.Name ?? "pending", labels: o.labels, image };
  }

  /** Idempotent: an instance already gone is not an error. */
  async deleteServer(id: number | string): Promise<void> {
    try {
      await this.send("TerminateInstances", ({ sdk, client }) =>
        client.send(new sdk.TerminateInstancesCommand({ InstanceIds: [String(id)] })),
      );
    } catch (err) {
      if (!(err instanceof DenvError && err.code === "not_found")) throw err;
    }
  }

  /** Instances tagged `key=value` (terminated ones left out); also proves the key works. */
  async listServers(label: string): Promise<CloudServer[]> {
    const [key, value] = label.includes("=") ? label.split("=", 2) : [label, undefined];
    const r = await this.send("DescribeInstances", ({ sdk, client }) =>
      client.send(
        new sdk.DescribeInstancesCommand({
          Filters: [
            value === undefined
              ? { Name: "tag-key", Values: [key as string] }
              : { Name: `tag:${key}`, Values: [value] },
          ],
        }),
      ),
    );
    return (r.Reservations ?? [])
      .flatMap((res) => res.Instances ?? [])
      .filter((i) => i.InstanceId && i.State?.Name !== "terminated")
      .map((i) => ({
        id: i.InstanceId as string,
        name: i.Tags?.find((t) => t.Key === "Name")?.Value ?? (i.InstanceId as string),
        status: i.State?.Name ?? "unknown",
        labels: Object.fromEntries((i.Tags ?? []).map((t) => [t.Key ?? "", t.Value ?? ""])),
      }));
  }
}
