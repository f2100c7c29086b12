/**
 * Reading a tree a container can change, from the host, without ever following a link: each
 * directory is held open and the next component is opened relative to it, with O_NOFOLLOW (through
 * /proc/self/fd/N/NAME, which is openat(N, NAME) for a runtime without openat). A component
 * swapped for a link between two steps is refused by the kernel, not followed out of the tree.
 *
 * Invariant (DESIGN, trust boundaries): denvd never follows a link a container made.
 */
import { constants, type Stats } from "node:fs";
import { type FileHandle, lstat, open, readdir } from "node:fs/promises";

const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
const FILE_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

export class NotFollowed extends Error {}

function checkName(name: string): void {
  if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0"))
    throw new NotFollowed(`bad name ${JSON.stringify(name)}`);
}

export class NoFollowDir {
  private readonly handle: FileHandle;

  private constructor(handle: FileHandle) {
    this.handle = handle;
  }

  /** Opens a root denvd itself chose (a dataset's path, a root filesystem's), which must be a directory. */
  static async open(root: string): Promise<NoFollowDir> {
    return new NoFollowDir(await open(root, DIR_FLAGS));
  }

  private at(name: string): string {
    checkName(name);
    return `/proc/self/fd/${this.handle.fd}/${name}`;
  }

  /** lstat of an entry (a link is reported as a link); null when it does not exist. */
  async lstat(name: string): Promise<Stats | null> {
    return lstat(this.at(name)).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT" || err.code === "ENOTDIR") return null;
      throw err;
    });
  }

  /** A subdirectory; a link (or anything but a directory) there is refused by the kernel. */
  async dir(name: string): Promise<NoFollowDir> {
    try {
      return new NoFollowDir(await open(this.at(name), DIR_FLAGS));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ELOOP" || code === "ENOTDIR") throw new NotFollowed(`${name} is not a directory`);
      throw err;
    }
  }

  /** A file to read; a link there is refused, a FIFO never blocks the open. */
  async file(name: string): Promise<FileHandle> {
    try {
      return await open(this.at(name), FILE_FLAGS);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ELOOP")
        throw new NotFollowed(`${name} is a symbolic link`);
      throw err;
    }
  }

  /** The raw names in the directory (as bytes: a name need not be UTF-8). */
  async names(): Promise<Buffer[]> {
    return readdir(`/proc/self/fd/${this.handle.fd}`, { encoding: "buffer" });
  }

  async close(): Promise<void> {
    await this.handle.close().catch(() => {});
  }
}
