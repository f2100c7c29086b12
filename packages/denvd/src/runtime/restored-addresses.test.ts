import assert from "node:assert/strict";
import { test } from "node:test";
import { addressLines, listedSubnets, subnetOf } from "./restored-addresses.ts";

test("subnetOf gives an address's network, and null for what is not an IPv4 CIDR", () => {
  assert.equal(subnetOf("10.231.0.3/24"), "10.231.0.0/24");
  assert.equal(subnetOf("172.18.5.200/20"), "172.18.0.0/20");
  assert.equal(subnetOf("192.168.1.77/32"), "192.168.1.77/32");
  assert.equal(subnetOf("255.255.255.255/1"), "128.0.0.0/1");
  assert.equal(subnetOf("1.2.3.4/0"), "0.0.0.0/0");
  for (const bad of [
    "10.0.0.1",
    "10.0.0.256/24",
    "10.0.0.1/33",
    "fe80::1/64",
    "x/24",
    "10.0.0.1/24; rm -rf /",
  ])
    assert.equal(subnetOf(bad), null, bad);
});

test("addressLines keeps each interface's global IPv4 addresses, in the action script's shape", () => {
  const ip = [
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
    "42: eth0    inet 10.231.0.3/24 brd 10.231.0.255 scope global eth0\\       valid_lft forever preferred_lft forever",
    "44: eth1@if45    inet 10.9.8.7/16 brd 10.9.255.255 scope global eth1",
    "46: $(reboot)    inet 10.1.1.1/24 scope global x",
    "47: eth2    inet 10.1.1.999/24 scope global eth2",
  ].join("\n");
  assert.equal(addressLines(ip), "eth0 10.231.0.3 10.231.0.0/24\neth1 10.9.8.7 10.9.0.0/16\n");
  assert.equal(addressLines(""), "");
});

test("addressLines gives an address a restore added the on-link route added with it", () => {
  const addrs = [
    "42: eth0    inet 10.232.0.3/24 brd 10.232.0.255 scope global eth0",
    "42: eth0    inet 10.231.0.3/32 scope global eth0",
  ].join("\n");
  const routes = [
    "10.231.0.0/24 dev eth0 scope link",
    "10.232.0.0/24 dev eth0 proto kernel scope link src 10.232.0.3",
    "10.1.0.5 dev eth0 scope link",
    "junk",
  ].join("\n");
  assert.equal(addressLines(addrs, routes), "eth0 10.232.0.3 10.232.0.0/24\neth0 10.231.0.3 10.231.0.0/24\n");
});

test("listedSubnets gives each subnet a checkpoint's list names once, and nothing of lines not of its shape", () => {
  const list = [
    "eth0 172.20.4.3 172.20.4.0/24",
    "eth0 172.31.9.2 172.31.9.0/24",
    "eth1 172.20.4.7 172.20.4.0/24",
    "eth0 10.0.0.1 10.0.0.1/24",
    "eth0 10.0.0.1 $(reboot)",
    "eth0 10.0.0.1",
    "",
  ].join("\n");
  assert.deepEqual(listedSubnets(list), ["172.20.4.0/24", "172.31.9.0/24"]);
});
