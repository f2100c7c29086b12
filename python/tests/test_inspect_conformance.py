"""Inspect conformance: the 44 self-check behaviours (Inspect's sandbox self-check)
and Inspect's call sequence (task_init("startup") -> sample_init -> checks -> sample_cleanup ->
task_cleanup("shutdown")), through denv.inspect's subclass against a live denv.

Each behaviour is written from the reference's check list, one test each, in its order, all against
one sample's environment as Inspect's self_check does."""

from __future__ import annotations

import asyncio
import inspect as pyinspect
import tempfile
import textwrap
import unittest
from pathlib import Path

from live import OPSBOX, import_without_frameworks, live

COMPOSE = textwrap.dedent(
    f"""\
    services:
      box:
        x-default: true
        image: {OPSBOX}
        user: "1000:1000"
        working_dir: /home/ubuntu
        command: ["sleep", "infinity"]
        volumes: ["home:/home/ubuntu"]
      aux:
        image: {OPSBOX}
        user: "1000:1000"
        command: ["sleep", "infinity"]
    volumes: {{ home: {{}} }}
    """
)


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


class InspectSelfCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        live()
        from denv.inspect import DenvSandboxEnvironment

        cls.S = DenvSandboxEnvironment
        cls.dir = tempfile.mkdtemp(prefix="denv-inspect-")
        cls.config = str(Path(cls.dir) / "compose.yaml")
        Path(cls.config).write_text(COMPOSE)
        run(cls.S.task_init("startup", cls.config))
        cls.envs = run(cls.S.sample_init("selfcheck", cls.config, {"__sample_id__": "1"}))
        cls.env = next(iter(cls.envs.values()))

    @classmethod
    def tearDownClass(cls) -> None:
        run(cls.S.sample_cleanup("selfcheck", cls.config, cls.envs, False))
        run(cls.S.task_cleanup("shutdown", cls.config, True))

    # helpers
    def ex(self, *args, **kw):  # noqa: ANN002, ANN003, ANN201
        return run(self.env.exec(*args, **kw))

    def write(self, name: str, contents: str | bytes) -> None:
        run(self.env.write_file(name, contents))

    def read(self, name: str, text: bool = True):  # noqa: ANN201
        return run(self.env.read_file(name, text=text))

    def rm(self, name: str) -> None:
        self.assertTrue(self.ex(["rm", "-f", "--", name]).success)

    # --- lifecycle as Inspect drives it ------------------------------------------------------------

    def test_00_default_service_first_and_named_services(self) -> None:
        self.assertEqual(list(self.envs), ["box", "aux"])
        self.assertEqual(self.ex(["whoami"]).stdout.strip(), "ubuntu")  # not root
        # The container's umask, as under `docker exec` (not the agent's private one for its socket).
        self.assertEqual(self.ex(["sh", "-c", "umask"]).stdout.strip(), "0022")
        aux = self.envs["aux"]
        self.assertEqual(run(aux.exec(["sh", "-c", "echo $HOSTNAME; id -u"])).stdout.split()[-1], "1000")

    def test_00_exec_has_inspects_eight_parameters(self) -> None:
        # SandboxEnvironmentProxy passes `concurrency` only when the bound exec has exactly 8.
        self.assertEqual(len(pyinspect.signature(self.env.exec).parameters), 8)
        self.assertTrue(hasattr(self.env, "_inject_lock"), "super().__init__() was called")
        self.assertTrue(self.S.is_docker_compatible())

    def test_00_base_class_members_work_on_it(self) -> None:
        # exec_remote reads what SandboxEnvironment.__init__ set; as_type narrows to our class.
        r = run(self.env.exec_remote(["echo", "remote"], stream=False))
        self.assertEqual(r.stdout, "remote\n")
        self.assertIs(self.env.as_type(self.S), self.env)
        with self.assertRaises(TypeError):
            self.env.as_type(int)

    def test_00_a_dict_config_is_read_back_as_compose_config(self) -> None:
        # Inspect validates a docker-compatible provider's dict config as its ComposeConfig first.
        import json

        import denv._registry  # noqa: F401
        from inspect_ai.util import ComposeConfig, deserialize_sandbox_specific_config

        as_dict = {
            "services": {
                "box": {"image": OPSBOX, "user": "1000:1000", "command": ["sleep", "infinity"], "x-default": True}
            }
        }
        cfg = deserialize_sandbox_specific_config("denv", json.loads(json.dumps(as_dict)))
        self.assertIsInstance(cfg, ComposeConfig)
        envs = run(self.S.sample_init("dict-config", cfg, {}))
        try:
            self.assertEqual(list(envs), ["box"])
            self.assertEqual(run(envs["box"].exec(["id", "-u"])).stdout, "1000\n")
        finally:
            run(self.S.sample_cleanup("dict-config", cfg, envs, False))

    def test_00_registered_as_denv(self) -> None:
        import denv._registry  # noqa: F401  (the entry point's module)
        from inspect_ai.util import registry_find_sandboxenv

        self.assertIs(registry_find_sandboxenv("denv"), self.S)

    def test_00_exec_output_limit(self) -> None:
        # Inspect's proxy re-checks each stream against MAX_EXEC_OUTPUT_SIZE; the provider may raise.
        from inspect_ai.util import OutputLimitExceededError, override_sandbox_output_limit

        with override_sandbox_output_limit(1024, "exec"):
            with self.assertRaises(OutputLimitExceededError) as cm:
                self.ex(["sh", "-c", "head -c 2048 /dev/zero | tr '\\0' a"])
            self.assertIn("limit of 1 KiB was exceeded", str(cm.exception))
            self.assertEqual(cm.exception.truncated_output, "a" * 1024)
            self.assertEqual(len(self.ex(["sh", "-c", "head -c 1024 /dev/zero | tr '\\0' b"]).stdout), 1024)

    def test_00_samples_are_isolated_forks(self) -> None:
        self.write("isolation.txt", "sample one")
        other = run(self.S.sample_init("selfcheck", self.config, {"__sample_id__": "2"}))
        try:
            r = run(other["box"].exec(["ls", "-1"]))
            self.assertNotIn("isolation.txt", r.stdout)
            self.assertNotEqual(other["box"].env_id, self.env.env_id)
        finally:
            run(self.S.sample_cleanup("selfcheck", self.config, other, False))
            run(self.S.sample_cleanup("selfcheck", self.config, other, True))  # idempotent
        from inspect_ai.util import SandboxUnavailableError

        with self.assertRaises(SandboxUnavailableError):
            run(other["box"].exec(["true"]))
        self.rm("isolation.txt")

    # --- the 44 checks ---------------------------------------------------------------------------

    def test_01_read_and_write_file_text(self) -> None:
        self.write("rw_text.file", "great #content\nincluding newlines")
        self.assertEqual(self.read("rw_text.file"), "great #content\nincluding newlines")
        self.rm("rw_text.file")

    def test_02_read_and_write_file_binary(self) -> None:
        self.write("rw_binary.file", b"\xc3\x28")
        self.assertEqual(self.read("rw_binary.file", text=False), b"\xc3\x28")
        self.rm("rw_binary.file")

    def test_03_read_and_write_large_file_binary(self) -> None:
        big = b"\xc3" * (50 * 1024 * 1024)
        self.write("rw_large.file", big)
        self.assertEqual(self.read("rw_large.file", text=False), big)
        self.rm("rw_large.file")

    def test_04_write_file_text_utf(self) -> None:
        s = "✨☽︎✨🌞︎︎✨🚀✨"
        self.write("utf.file", s)
        got = self.read("utf.file")
        self.assertIsInstance(got, str)
        self.assertEqual(got, s)
        self.rm("utf.file")

    def test_05_read_and_write_file_including_directory_absolute(self) -> None:
        self.write("/tmp/denv_rw_abs/test.file", "absolutely")
        self.assertEqual(self.read("/tmp/denv_rw_abs/test.file"), "absolutely")
        self.rm("/tmp/denv_rw_abs/test.file")
        self.assertTrue(self.ex(["rmdir", "/tmp/denv_rw_abs"]).success)

    def test_06_read_and_write_file_including_directory_relative(self) -> None:
        self.write("denv_rw_rel/test.file", "relatively")
        self.assertEqual(self.read("denv_rw_rel/test.file"), "relatively")
        self.assertTrue(self.ex(["test", "-f", "/home/ubuntu/denv_rw_rel/test.file"]).success)
        self.rm("denv_rw_rel/test.file")
        self.assertTrue(self.ex(["rmdir", "denv_rw_rel"]).success)

    def test_07_read_file_zero_length(self) -> None:
        self.ex(["touch", "zero.file"])
        got = self.read("zero.file")
        self.assertIsInstance(got, str)
        self.assertEqual(got, "")
        self.rm("zero.file")

    def test_08_read_file_not_found(self) -> None:
        with self.assertRaises(FileNotFoundError) as cm:
            self.read("nonexistent")
        self.assertIn("nonexistent", str(cm.exception))

    def test_09_read_file_not_allowed(self) -> None:
        self.write("not_allowed.file", "inaccessible #content")
        self.ex(["chmod", "-r", "not_allowed.file"])
        with self.assertRaises(PermissionError) as cm:
            self.read("not_allowed.file")
        self.assertIn("not_allowed.file", str(cm.exception))
        self.ex(["chmod", "+r", "not_allowed.file"])
        self.rm("not_allowed.file")

    def test_10_read_file_is_directory(self) -> None:
        with self.assertRaises(IsADirectoryError) as cm:
            self.read("/etc")
        self.assertIn("directory", str(cm.exception))

    def test_11_read_file_nonsense_name(self) -> None:
        with self.assertRaises(FileNotFoundError) as cm:
            self.read("https:/en.wikipedia.org/wiki/Bart%C5%82omiej_Kasprzykowski")
        self.assertIn("wikipedia", str(cm.exception))

    def test_12_read_file_limit(self) -> None:
        from inspect_ai.util import OutputLimitExceededError, override_sandbox_output_limit

        self.write("large.file", "a" * 2048)
        with override_sandbox_output_limit(1024, "read_file"):
            with self.assertRaises(OutputLimitExceededError) as cm:
                self.read("large.file")
        self.assertIn("limit of 1 KiB was exceeded", str(cm.exception))
        self.assertEqual(len(self.read("large.file")), 2048)  # the limit is read per call
        self.rm("large.file")

    def _zero(self, contents: str | bytes) -> None:
        self.write("zero_w.file", contents)
        got = self.read("zero_w.file", text=isinstance(contents, str))
        self.assertIs(type(got), type(contents))
        self.assertEqual(got, contents)
        self.rm("zero_w.file")

    def _space(self, contents: str | bytes) -> None:
        self.write("file with space.file", contents)
        self.assertEqual(self.read("file with space.file", text=isinstance(contents, str)), contents)
        self.rm("file with space.file")

    def _is_dir(self, contents: str | bytes) -> None:
        self.write("/tmp/denv_w_is_dir/file", "unused")
        with self.assertRaises(IsADirectoryError) as cm:
            self.write("/tmp/denv_w_is_dir", contents)
        self.assertIn("directory", str(cm.exception))
        self.ex(["rm", "-rf", "/tmp/denv_w_is_dir"])

    def _no_perm(self, contents: str | bytes) -> None:
        self.write("w_no_perm.file", "impervious #content")
        self.ex(["chmod", "-w", "w_no_perm.file"])
        with self.assertRaises(PermissionError) as cm:
            self.write("w_no_perm.file", contents)
        self.assertIn("w_no_perm.file", str(cm.exception))
        self.assertEqual(self.read("w_no_perm.file"), "impervious #content")
        self.ex(["chmod", "+w", "w_no_perm.file"])
        self.rm("w_no_perm.file")

    def _exists(self, first: str | bytes, second: str | bytes) -> None:
        self.write("exists.file", first)
        self.write("exists.file", second)
        self.assertEqual(self.read("exists.file", text=isinstance(second, str)), second)
        self.rm("exists.file")

    def test_13_write_text_file_zero_length(self) -> None:
        self._zero("")

    def test_14_write_text_file_space(self) -> None:
        self._space("to the moon")

    def test_15_write_text_file_is_directory(self) -> None:
        self._is_dir("content cannot go in a directory")

    def test_16_write_text_file_without_permissions(self) -> None:
        self._no_perm("this won't stick")

    def test_17_write_text_file_exists(self) -> None:
        self._exists("mundane content", "altered content")

    def test_18_write_binary_file_zero_length(self) -> None:
        self._zero(b"")

    def test_19_write_binary_file_space(self) -> None:
        self._space(b"\xc3\x28")

    def test_20_write_binary_file_is_directory(self) -> None:
        self._is_dir(b"\xc3\x28")

    def test_21_write_binary_file_without_permissions(self) -> None:
        self._no_perm(b"\xc3\x28")

    def test_22_write_binary_file_exists(self) -> None:
        self._exists(b"\xc3\x28", b"\xc3\x29")

    def test_23_exec_output(self) -> None:
        self.assertEqual(self.ex(["sh", "-c", "echo foo; echo bar"]).stdout, "foo\nbar\n")

    def test_24_exec_stderr(self) -> None:
        r = self.ex(["sh", "-c", "echo baz >&2"])
        self.assertEqual(r.stderr, "baz\n")
        self.assertEqual(r.stdout, "")

    def test_25_exec_output_utf(self) -> None:
        r = self.ex(["sh", "-c", r"printf '\303\251t\303\251 \342\234\250\n'"])
        self.assertEqual(r.stdout, "été ✨\n")

    def test_26_exec_stderr_utf(self) -> None:
        r = self.ex(["sh", "-c", r"printf '\303\251t\303\251 \342\234\250\n' >&2"])
        self.assertEqual(r.stderr, "été ✨\n")

    def test_27_exec_returncode(self) -> None:
        r = self.ex(["sh", "-c", "exit 70"])
        self.assertEqual(r.returncode, 70)
        self.assertFalse(r.success)

    def test_28_exec_timeout(self) -> None:
        with self.assertRaises(TimeoutError):
            self.ex(["sleep", "4"], timeout=2)

    def test_29_exec_timeout_not_raised_on_fast_signal_death(self) -> None:
        r = self.ex(["sh", "-c", "kill -TERM $$"], timeout=30)
        self.assertEqual(r.returncode, 143)

    def _gone(self, marker: str) -> bool:
        for _ in range(10):
            if marker not in self.ex(["sh", "-c", "ps aux"], user="root").stdout:
                return True
            run(asyncio.sleep(0.5))
        return False

    def test_30_exec_timeout_kills_process(self) -> None:
        with self.assertRaises(TimeoutError):
            self.ex(["sleep", "61.4242"], timeout=1)
        self.assertTrue(self._gone("61.4242"), "the timed-out process is still running")

    def test_31_exec_timeout_kills_child_processes(self) -> None:
        with self.assertRaises(TimeoutError):
            self.ex(["sh", "-c", "sleep 62.4343 & sleep 63.4343; wait"], timeout=1)
        self.assertTrue(self._gone("62.4343"), "the backgrounded child is still running")
        self.assertTrue(self._gone("63.4343"))

    def test_32_exec_permission_error(self) -> None:
        with self.assertRaises(PermissionError):
            self.ex(["/etc/passwd"])

    def test_33_exec_env_vars(self) -> None:
        r = self.ex(["sh", "-c", "echo $DENV_A-$DENV_B"], env={"DENV_A": "one", "DENV_B": "two words"})
        self.assertEqual(r.stdout, "one-two words\n")

    def test_34_exec_input_text(self) -> None:
        self.assertEqual(self.ex(["cat"], input="hello\nworld").stdout, "hello\nworld")
        self.assertEqual(self.ex(["cat"], input="").stdout, "")

    def test_35_exec_input_shell_special(self) -> None:
        s = "$HOME `whoami` 'single' \"double\" \\backslash\n$(echo no) ; | & > <\n"
        self.assertEqual(self.ex(["cat"], input=s).stdout, s)

    def test_36_exec_input_binary(self) -> None:
        import base64

        data = b"\x00\x01\xff\xfe binary \x00 tail\xff"
        r = self.ex(["base64", "-w0"], input=data)
        self.assertEqual(base64.b64decode(r.stdout), data)

    def test_37_exec_input_large(self) -> None:
        data = b"x" * (50 * 1024 * 1024)
        self.assertEqual(self.ex(["wc", "-c"], input=data).stdout.strip(), str(len(data)))

    def test_38_exec_large_command(self) -> None:
        args = [chr(ord("a") + i) * (64 * 1024) for i in range(16)]
        r = self.ex(["printf", "%s", *args])
        self.assertTrue(r.success, r.stderr[:200])
        self.assertEqual(r.stdout, "".join(args))

    def test_39_exec_as_user(self) -> None:
        name = "denv-selfcheck-user"
        help_text = self.ex(["adduser", "--help"])
        cmd = (
            ["adduser", "-D", name]
            if "BusyBox" in help_text.stdout + help_text.stderr
            else ["adduser", "--comment", "self_check", "--disabled-password", name]
        )
        try:
            added = self.ex(cmd, user="root", timeout=10)
            self.assertTrue(added.success, added.stderr)
            self.assertEqual(self.ex(["whoami"], user="root").stdout.strip(), "root")
            self.assertEqual(self.ex(["whoami"], user=name).stdout.strip(), name)
        finally:
            self.ex(["userdel", "-r", name], user="root")

    def test_40_exec_as_nonexistent_user(self) -> None:
        r = self.ex(["whoami"], user="nonexistent")
        self.assertFalse(r.success)
        self.assertIn("unable to find user nonexistent", r.stdout + r.stderr)

    def test_41_cwd_unspecified(self) -> None:
        self.write("cwd_unspecified.file", "ls me")
        self.assertIn("cwd_unspecified.file", self.ex(["ls", "-1"]).stdout.splitlines())
        self.rm("cwd_unspecified.file")

    def test_42_cwd_custom(self) -> None:
        self.assertIn("env", self.ex(["ls"], cwd="/usr/bin").stdout.split())

    def test_43_cwd_relative(self) -> None:
        self.ex(["mkdir", "-p", "subdir"])
        self.write("subdir/cwd_relative.file", "ls me")
        self.assertIn("cwd_relative.file", self.ex(["ls"], cwd="subdir").stdout.split())
        self.ex(["rm", "-rf", "subdir"])

    def test_44_cwd_absolute(self) -> None:
        self.write("/tmp/denv_cwd_abs/abs.file", "ls me")
        self.assertIn("abs.file", self.ex(["ls"], cwd="/tmp/denv_cwd_abs").stdout.split())
        self.ex(["rm", "-rf", "/tmp/denv_cwd_abs"])


class InspectWithoutFramework(unittest.TestCase):
    def test_missing_inspect_says_how_to_install(self) -> None:
        self.assertIn("pip install 'denv[inspect]'", import_without_frameworks("denv.inspect"))
        # The package itself imports without any framework.
        self.assertEqual(import_without_frameworks("denv"), "imported")


if __name__ == "__main__":
    unittest.main()
