import assert from "node:assert/strict";
import { test } from "node:test";
import { GRADE_DIR, GRADER_PATH, graderArgv, graderEnv, isolatedCommand } from "./grader-command.ts";

test("a grader's environment keeps declared values and none that steer an interpreter or the loader", () => {
  const env = graderEnv(
    {
      DB_URL: "postgres://db",
      PATH: "/work/bin:/usr/bin",
      HOME: "/work",
      LD_PRELOAD: "/work/evil.so",
      LD_LIBRARY_PATH: "/work",
      PYTHONPATH: "/work",
      PYTHONSTARTUP: "/work/s.py",
      BASH_ENV: "/work/.bashrc",
      ENV: "/work/.profile",
      NODE_OPTIONS: "--require /work/x.js",
      PERL5LIB: "/work",
    },
    { DENV_REWARD_FILE: "/denv-grade/reward" },
  );
  assert.deepEqual(env, {
    DB_URL: "postgres://db",
    PATH: GRADER_PATH,
    HOME: GRADE_DIR,
    LANG: "C.UTF-8",
    DENV_REWARD_FILE: "/denv-grade/reward",
  });
});

test("python runs isolated, by any name; other commands are left as written", () => {
  assert.deepEqual(isolatedCommand(["python3", "-c", "x"]), ["python3", "-I", "-c", "x"]);
  assert.deepEqual(isolatedCommand(["/usr/bin/python3.11", "t.py"]), ["/usr/bin/python3.11", "-I", "t.py"]);
  assert.deepEqual(isolatedCommand(["python", "-I", "t.py"]), ["python", "-I", "t.py"]);
  assert.deepEqual(isolatedCommand(["sh", "-c", "python3 x"]), ["sh", "-c", "python3 x"]);
  assert.deepEqual(isolatedCommand(["pythonic"]), ["pythonic"]);
  assert.deepEqual(graderArgv(["python3", "g.py"], { A: "1" }), [
    "/usr/bin/env",
    "-i",
    "A=1",
    "python3",
    "-I",
    "g.py",
  ]);
});
