/**
 * Proof that a target streams a command's output as it is written, with no clock in it: the
 * command prints `ready`, then waits (up to a minute) for a file that only a second command makes,
 * and that second command is sent only once `ready` has arrived. A target that answers output only
 * when a command ends never shows `ready` in time, and the command says `gave-up`.
 */
import { DenvClient } from "@denv/sdk";

export async function streamedOutput(server: { url: string; key: string }, envId: string): Promise<string> {
  const client = new DenvClient({ baseUrl: server.url, apiKey: server.key });
  const flag = `/tmp/denv-go-${Math.random().toString(36).slice(2)}`;
  let poked: Promise<unknown> | null = null;
  const got: string[] = [];
  await client.execStream(
    envId,
    {
      command: `echo ready; i=0; while [ ! -f ${flag} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; if [ -f ${flag} ]; then echo done; else echo gave-up; fi`,
    },
    (which, data) => {
      got.push(`${which}:${data.toString()}`);
      if (!poked && data.toString().includes("ready"))
        poked = client.exec(envId, { command: `touch ${flag}` });
    },
  );
  await poked;
  return got.join("");
}
