/* Generated from packages/denvd/src/exec/agent-protocol.ts: do not edit; run
 * `node packages/denvd/src/exec/agent-protocol.ts` after changing the table there. */
#ifndef DENV_AGENT_PROTOCOL_H
#define DENV_AGENT_PROTOCOL_H

#define PROTOCOL_VERSION 2

#define MODE_PORT 0xffffffffu
#define MODE_FILES 0xfffffffeu
#define MODE_PUT 0xfffffffdu
#define MODE_FSOP 0xfffffffcu

#define FRAME_IN_DATA 0
#define FRAME_IN_END 1
#define FRAME_IN_KILL 9

#define FRAME_OUT_STDOUT 1
#define FRAME_OUT_STDERR 2
#define FRAME_OUT_STATUS 3
#define FRAME_OUT_ENTRIES 4
#define FRAME_OUT_CREATED 5

#define OP_STAT 1
#define OP_LIST 2
#define OP_MKDIR 3
#define OP_REMOVE 4
#define OP_RENAME 5

#define FS_OK 0
#define FS_NOT_FOUND 1
#define FS_PERMISSION 2
#define FS_IS_DIR 3
#define FS_NOT_DIR 4
#define FS_EXISTS 5
#define FS_NO_SPACE 6
#define FS_INVALID 7
#define FS_OTHER 8
#define FS_NOT_EMPTY 9
#define FS_NO_USER 10
#define FS_LINK 11

#define BTRFS_BUILTIN "denv-agent:btrfs"

#endif
