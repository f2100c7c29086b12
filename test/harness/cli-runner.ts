/** The real `denv` command, run as a user runs it against a test's server: exit code and output. */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";

export interface CliAnswer {
  code: number;
  stdout: string;
  stderr: string;
}

export function cliRunner(server: () => { url: string; key: string }, cwd?: string) {
  return async (...args: string[]): Promise<CliAnswer> => {
    const { url, key } = server();
    try {
      const r = await promisify(execFile)(
        process.execPath,
        [join(import.meta.dirname, "../../packages/cli/bin/denv.js"), ...args],
        {
          encoding: "utf8",
          cwd,
          maxBuffer: 64 * 1024 * 1024,
          env: { ...process.env, DENV_SERVER: url, DENV_API_KEY: key, DENV_NO_STDIN: "1" },
        },
      );
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };
}
