/**
 * A built Karotte environment image → one denv project per task (as Karotte's images are laid out:
 * a Karotte environment is one self-contained image; inside it, `karotte run --no-containerized
 * --config run_config.json` runs a task and writes out/transcript.json). The project builds FROM
 * the image with the task's run config and a `denv-episode` command that runs it, in a workspace
 * kept in every snapshot; the agent's service runs as uid 1000; the verifier reads the transcript's
 * result (the score of the last step that was scored) as root on a fork.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as stringifyYaml } from "yaml";
import { UsageError } from "../output.ts";
import { projectNameFor } from "./harbor-import.ts";

export const KAROTTE_WORKDIR = "/work";

/**
 * The verifier, as root on the grading fork: the transcript's top-level score, else the last
 * scored step's. The transcript lies in the agent's workspace, so it is opened without following a
 * link in any component, read only when it is a regular file with one link, and bounded (16 MiB).
 */
const READ_SCORE = `
import json, os, stat, sys
def fail(why):
    print(why, file=sys.stderr); sys.exit(1)
try:
    work = os.open("${KAROTTE_WORKDIR}", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    out = os.open("out", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=work)
    fd = os.open("transcript.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=out)
except OSError as e:
    fail(f"no transcript at ${KAROTTE_WORKDIR}/out/transcript.json (links are not followed): {e.strerror}")
st = os.fstat(fd)
if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
    fail("the transcript is not a regular file with one link")
with os.fdopen(fd, "rb") as f:
    data = f.read(16 * 1024 * 1024 + 1)
if len(data) > 16 * 1024 * 1024:
    fail("the transcript is over 16 MiB")
try:
    t = json.loads(data)
except ValueError as e:
    fail(f"the transcript is not JSON: {e}")
score = t.get("score") if isinstance(t, dict) else None
if not isinstance(score, (int, float)) and isinstance(t, dict):
    steps = t.get("steps") if isinstance(t.get("steps"), list) else []
    scored = [s.get("score") for s in steps if isinstance(s, dict) and isinstance(s.get("score"), (int, float))]
    score = scored[-1] if scored else None
if not isinstance(score, (int, float)) or isinstance(score, bool):
    fail("the transcript has no scored step")
print(float(score))
`;

export interface KarotteImport {
  name: string;
  dir: string;
  task: string;
}

const TASK_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const IMAGE_REF = /^[a-z0-9][a-z0-9._\-/:@]*$/;

export function importKarotteTask(
  image: string,
  task: string,
  args: { out: string; model: string; egress: "allow" | "deny" },
): KarotteImport {
  if (!IMAGE_REF.test(image) || image.length > 512)
    throw new UsageError(`${image} is not an image reference`);
  if (!TASK_ID.test(task))
    throw new UsageError(`task id ${JSON.stringify(task)}: letters, digits, . _ - only`);
  const name = projectNameFor(`karotte-${task}`);
  const dir = join(args.out, name);
  mkdirSync(join(dir, "karotte"), { recursive: true });
  const runConfig = {
    run_id: `denv-${task}`,
    task_id: task,
    model: args.model,
    agent: "default",
    extra_config: {},
  };
  writeFileSync(join(dir, "karotte", "run_config.json"), `${JSON.stringify(runConfig, null, 2)}\n`);
  writeFileSync(
    join(dir, "karotte", "denv-episode"),
    `#!/bin/sh\n# One episode of Karotte task ${task}: karotte's own runner, in the image, not containerized again.\ncd ${KAROTTE_WORKDIR} && exec karotte run --no-containerized --config /opt/denv/run_config.json "$@"\n`,
    { mode: 0o755 },
  );
  writeFileSync(
    join(dir, "karotte", "Dockerfile"),
    `# Karotte task ${task} from ${image}, as a denv project (denv import karotte).\nFROM ${image}\nUSER root\nCOPY run_config.json /opt/denv/run_config.json\nCOPY denv-episode /usr/local/bin/denv-episode\nRUN chmod 755 /usr/local/bin/denv-episode && mkdir -p ${KAROTTE_WORKDIR} && chown 1000:1000 ${KAROTTE_WORKDIR}\n`,
  );
  const compose = {
    name,
    "x-denv": {
      kind: "rl-environment",
      // The student calls its model's API from inside the image: deny only for a local model.
      egress: args.egress,
      clock: "real",
      agent: { service: "karotte" },
      verifier: {
        service: "karotte",
        // $$: a literal $ (compose interpolates the file's $VAR).
        command: ["python3", "-c", READ_SCORE.replace(/\$/g, "$$$$")],
        timeout: "60s",
      },
    },
    services: {
      karotte: {
        build: "./karotte",
        user: "1000:1000",
        command: ["sleep", "infinity"],
        working_dir: KAROTTE_WORKDIR,
        environment: { HOME: KAROTTE_WORKDIR },
        volumes: [`work:${KAROTTE_WORKDIR}`],
      },
    },
    volumes: { work: {} },
  };
  writeFileSync(
    join(dir, "docker-compose.yaml"),
    `# Imported from the Karotte image ${image}, task ${task}, by \`denv import karotte\`.\n# An episode: denv exec ${name}/alpha -- denv-episode\n${stringifyYaml(compose, { lineWidth: 0, version: "1.1" })}`,
  );
  writeFileSync(
    join(dir, "denv-import.json"),
    `${JSON.stringify({ from: "karotte", image, task, run_config: runConfig, unmapped: ["Karotte's own sandbox (firewall, disk quota, uid switch) is replaced by denv's: the harness runs as uid 1000 in the service"] }, null, 2)}\n`,
  );
  return { name, dir, task };
}
