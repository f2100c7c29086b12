/**
 * How a grader's command runs where the agent never wrote: under `env -i` with an environment denvd
 * writes (a fixed PATH of system directories, HOME and the working directory at /denv-grade, an
 * empty directory the agent has never seen), the service's declared variables except those that
 * steer an interpreter or the loader, and Python isolated (`-I`: no current directory, user site or
 * PYTHON* variables on its path). A module, sitecustomize.py, .bashrc, PATH entry or LD_PRELOAD the
 * agent planted is then never on the grader's way.
 */

/** The grader's working directory and HOME: made fresh for each grade, root-owned. */
export const GRADE_DIR = "/denv-grade";
/** System directories only: none of them is writable by a non-root agent. */
export const GRADER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Variables that choose code to load or start-up files to read: never passed to a grader.
const STEERING =
  /^(PATH|HOME|PWD|OLDPWD|ENV|BASH_ENV|CDPATH|GLOBIGNORE|SHELLOPTS|BASHOPTS|PS4|IFS|LD_.*|PYTHON.*|PERL5?LIB|PERL5OPT|PERLLIB|RUBYOPT|RUBYLIB|NODE_OPTIONS|NODE_PATH|GCONV_PATH|LOCPATH|NLSPATH|XDG_.*|TMPDIR|GIT_.*|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|CLASSPATH)$/;

/** The environment a grader starts with (nothing else is inherited). */
export function graderEnv(
  declared: Record<string, string>,
  extra: Record<string, string>,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(declared)) if (!STEERING.test(k) && !k.includes("=")) env[k] = v;
  return { ...env, PATH: GRADER_PATH, HOME: GRADE_DIR, LANG: "C.UTF-8", ...extra };
}

/** `python3 …` → `python3 -I …` (any python, by name or path); other commands as they are. */
export function isolatedCommand(argv: readonly string[]): string[] {
  const [head, ...rest] = argv;
  if (head === undefined) return [];
  const name = head.slice(head.lastIndexOf("/") + 1);
  if (/^python(\d+(\.\d+)*)?$/.test(name) && !rest.includes("-I")) return [head, "-I", ...rest];
  return [head, ...rest];
}

/** The argv that runs `command` as a grader: `env -i K=V … command` (env by its path: no PATH lookup). */
export function graderArgv(command: readonly string[], env: Record<string, string>): string[] {
  return [
    "/usr/bin/env",
    "-i",
    ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
    ...isolatedCommand(command),
  ];
}
