/**
 * E2B's SDK on denv (/e2b), each figure beside its peers in the same run, on the same image:
 *   `sandbox.commands.run("echo hi")` through the unmodified E2B SDK vs POST /v1/envs/{id}/exec of
 *     the same echo vs the Engine API's exec in the same container;
 *   `Sandbox.create(image)` until its first `commands.run` answers vs POST /v1/sandboxes of the same
 *     image until its first /v1 exec answers.
 * The SDK runs its commands as `bash -l -c CMD` (and denv starts them under a shell that reports the
 * pid): that is part of what an E2B user waits for, so it is measured as such.
 */
import Docker from "dockerode";
import { Sandbox } from "e2b";
import { engineExec } from "./api-bench.ts";
import { log, ms, openBenchRig } from "./bench-rig.ts";
import { type Metric, metricOf, shuffled } from "./bench-stats.ts";

const docker = new Docker();
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const IMAGE_SANDBOX = { image: OPSBOX, cmd: ["sleep", "infinity"], user: "1000:1000", egress: "deny" };

export async function e2bBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("e2b");
  const { api, server, denvd } = rig;
  const results: Record<string, Metric> = {};
  // The SDK's own configuration: three variables, as a user sets them.
  process.env.E2B_API_URL = `${server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${server.url}/e2b`;
  process.env.E2B_API_KEY = rig.key;
  try {
    // --- exec ---
    const sbx = await Sandbox.create(OPSBOX);
    const v1 = (await api("POST", "/v1/sandboxes", IMAGE_SANDBOX)).id as string;
    const stack = (
      await server.store
        .selectFrom("environments")
        .select("stack_id")
        .where("id", "=", v1)
        .executeTakeFirstOrThrow()
    ).stack_id as string;
    const container = docker.getContainer(denvd.stack(stack).containers.main as string);
    const e2bExec: number[] = [];
    const v1Exec: number[] = [];
    const engine: number[] = [];
    const v1Login: number[] = [];
    const rounds = quick ? 50 : 200;
    for (let i = 0; i < rounds; i++)
      for (const who of shuffled(["e2b", "v1", "engine", "v1-login"], i + 1)) {
        const t = performance.now();
        if (who === "v1-login") {
          // What the SDK asks for: the command in a login shell.
          const r = await api("POST", `/v1/envs/${v1}/exec`, {
            command: ["/bin/bash", "-l", "-c", "echo hi"],
          });
          v1Login.push(performance.now() - t);
          if (r.stdout !== "hi\n") throw new Error(`v1 exec: ${JSON.stringify(r)}`);
        } else if (who === "e2b") {
          const r = await sbx.commands.run("echo hi");
          e2bExec.push(performance.now() - t);
          if (r.stdout !== "hi\n") throw new Error(`e2b exec: ${JSON.stringify(r)}`);
        } else if (who === "v1") {
          const r = await api("POST", `/v1/envs/${v1}/exec`, { command: ["echo", "hi"] });
          v1Exec.push(performance.now() - t);
          if (r.stdout !== "hi\n") throw new Error(`v1 exec: ${JSON.stringify(r)}`);
        } else {
          const r = await engineExec(container, ["echo", "hi"]);
          engine.push(performance.now() - t);
          if (r.stdout !== "hi\n") throw new Error(`engine exec: ${JSON.stringify(r)}`);
        }
      }
    results.e2b_exec_p50_ms = metricOf(
      e2bExec,
      "ms",
      'E2B SDK commands.run("echo hi") against /e2b, output checked',
      1,
    );
    results.e2b_exec_v1_p50_ms = metricOf(
      v1Exec,
      "ms",
      "POST /v1/envs/{id}/exec of echo in the same image",
      1,
    );
    results.e2b_exec_v1_login_p50_ms = metricOf(
      v1Login,
      "ms",
      'POST /v1/envs/{id}/exec of bash -l -c "echo hi" (the command line the SDK sends)',
      1,
    );
    results.e2b_exec_engine_p50_ms = metricOf(
      engine,
      "ms",
      "Engine API exec create + start + inspect of echo",
      1,
    );
    log(
      `e2b: exec ${ms(e2bExec)} ms through the SDK, ${ms(v1Exec)} ms through /v1 (${ms(v1Login)} ms in a login shell), ${ms(engine)} ms through the engine`,
    );
    await sbx.kill();
    await api("DELETE", `/v1/envs/${v1}`);

    // --- create ---
    const e2bCreate: number[] = [];
    const v1Create: number[] = [];
    const byE2b = async () => {
      const t = performance.now();
      const s = await Sandbox.create(OPSBOX);
      const r = await s.commands.run("echo hi");
      const elapsed = performance.now() - t;
      if (r.stdout !== "hi\n") throw new Error(`e2b create: ${JSON.stringify(r)}`);
      await s.kill();
      return elapsed;
    };
    const byV1 = async () => {
      const t = performance.now();
      const id = (await api("POST", "/v1/sandboxes", IMAGE_SANDBOX)).id as string;
      const r = await api("POST", `/v1/envs/${id}/exec`, { command: ["echo", "hi"] });
      const elapsed = performance.now() - t;
      if (r.stdout !== "hi\n") throw new Error(`v1 create: ${JSON.stringify(r)}`);
      await api("DELETE", `/v1/envs/${id}`);
      return elapsed;
    };
    await byE2b(); // warm-up, untimed
    await byV1();
    for (let i = 0; i < (quick ? 6 : 20); i++)
      for (const who of shuffled(["e2b", "v1"], i + 1))
        if (who === "e2b") e2bCreate.push(await byE2b());
        else v1Create.push(await byV1());
    results.e2b_create_p50_ms = metricOf(
      e2bCreate,
      "ms",
      "E2B SDK Sandbox.create(image) until its first commands.run answers",
      0,
    );
    results.e2b_create_v1_p50_ms = metricOf(
      v1Create,
      "ms",
      "POST /v1/sandboxes of the same image until its first /v1 exec answers",
      0,
    );
    log(`e2b: create ${ms(e2bCreate)} ms through the SDK, ${ms(v1Create)} ms through /v1`);
  } finally {
    await rig.close();
  }
  return results;
}
