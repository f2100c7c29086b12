import assert from "node:assert/strict";
import { test } from "node:test";
import { fibLocalAddresses, isLoopback, tcpPeers } from "./proc-sockets.ts";

test("tcpPeers lists sockets with a peer, with the inode a descriptor links to", () => {
  const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1B58 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0 100 0 0 10 0
   1: 0300E70A:CF10 0200E70A:1B58 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0 20 4 30 10 -1
   2: 0300E70A:A000 0100E70A:1F90 08 00000000:00000000 00:00000000 00000000     0        0 1003 1 0 20 4 30 10 -1
   3: 0300E70A:A001 0100E70A:1F90 06 00000000:00000000 00:00000000 00000000     0        0 0 3 0
   garbage`;
  assert.deepEqual(tcpPeers(tcp), [
    { inode: "1002", peer: "10.231.0.2:7000", address: "10.231.0.2" },
    { inode: "1003", peer: "10.231.0.1:8080", address: "10.231.0.1" },
  ]);
  const tcp6 = `  sl  local_address                         remote_address                        st
   0: 0000000000000000FFFF00000300E70A:CF10 0000000000000000FFFF00000200E70A:1B58 01 00000000:00000000 00:00000000 00000000     0        0 2001 1
   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:A002 01 00000000:00000000 00:00000000 00000000     0        0 2002 1`;
  const six = tcpPeers(tcp6);
  assert.deepEqual(six[0], { inode: "2001", peer: "10.231.0.2:7000", address: "10.231.0.2" });
  assert.ok(isLoopback(six[1]?.address ?? ""), JSON.stringify(six[1]));
  assert.ok(isLoopback("127.0.0.1"));
  assert.ok(!isLoopback("10.0.0.1"));
});

test("fibLocalAddresses reads a namespace's own addresses, secondaries included", () => {
  const fib = `Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 10.231.0.0/24 2 0 2
        |-- 10.231.0.0
           /24 link UNICAST
        |-- 10.231.0.3
           /32 host LOCAL
     |-- 10.232.0.9
        /32 host LOCAL
     |-- 127.0.0.1
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.231.0.3
        /32 host LOCAL`;
  assert.deepEqual(fibLocalAddresses(fib).sort(), ["10.231.0.3", "10.232.0.9", "127.0.0.1"]);
});
