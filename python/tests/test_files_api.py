"""The Python client's files surface against a live denv: an image sandbox running as ubuntu
(1000), written and read as that user by default, with stat, list, mkdir, remove and rename."""

from __future__ import annotations

import io
import tarfile
import unittest

from live import OPSBOX, client, live


class FilesApi(unittest.TestCase):
    env: dict

    @classmethod
    def setUpClass(cls) -> None:
        live()
        cls.env = client().sandbox(image=OPSBOX, cmd=["sleep", "infinity"], user="1000:1000", volumes=["/home/ubuntu"])

    @classmethod
    def tearDownClass(cls) -> None:
        client().destroy(cls.env["id"])

    def test_files_are_the_users_and_never_replace_a_directory(self) -> None:
        from denv.errors import DenvError

        c, env = client(), self.env["id"]
        self.assertTrue(c.mkdir(env, "/home/ubuntu/py/inner"))
        self.assertFalse(c.mkdir(env, "/home/ubuntu/py/inner"))
        c.put_files(env, "/home/ubuntu/py", {"a.txt": b"alpha", "inner/b.txt": b"beta"})
        st = c.stat(env, "/home/ubuntu/py/a.txt")
        self.assertEqual((st["type"], st["size"], st["owner"]), ("file", 5, "ubuntu"))
        names = [e["path"] for e in c.list(env, "/home/ubuntu/py", depth=2)]
        self.assertEqual(names, ["/home/ubuntu/py/a.txt", "/home/ubuntu/py/inner", "/home/ubuntu/py/inner/b.txt"])
        with self.assertRaises(DenvError) as e:
            c.put_files(env, "/home/ubuntu/py", {"inner": b"flat"})
        self.assertEqual(e.exception.code, "is_directory")
        self.assertEqual(c.get_files(env, "/home/ubuntu/py/inner/b.txt"), {"b.txt": b"beta"})
        c.rename(env, "/home/ubuntu/py/a.txt", "/home/ubuntu/py/c.txt")
        with self.assertRaises(DenvError) as e:
            c.remove(env, "/home/ubuntu/py")
        self.assertEqual(e.exception.code, "conflict")
        c.remove(env, "/home/ubuntu/py", recursive=True)
        with self.assertRaises(DenvError) as e:
            c.stat(env, "/home/ubuntu/py")
        self.assertEqual(e.exception.code, "not_found")

    def test_permissions_hold_and_root_can_be_asked_for(self) -> None:
        from denv.errors import DenvError

        c, env = client(), self.env["id"]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo("x.conf")
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
        with self.assertRaises(DenvError) as e:
            c.put_tar(env, "/etc/denv-py", buf.getvalue())
        self.assertEqual(e.exception.code, "permission_denied")
        c.put_tar(env, "/etc/denv-py", buf.getvalue(), user="root")
        self.assertEqual(c.stat(env, "/etc/denv-py/x.conf")["owner"], "root")
        out = c.exec(env, 'echo "$HOME $USER"')
        self.assertEqual(out.stdout, b"/home/ubuntu ubuntu\n")


if __name__ == "__main__":
    unittest.main()
