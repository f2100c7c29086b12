#!/usr/bin/env node
// The `denv` command (the launcher that brings Node 24 is @denv/protocol's, shared with denvd).
import { launch } from "@denv/protocol/node24-launcher";

await launch("denv", new URL("../src/main.ts", import.meta.url).href);
