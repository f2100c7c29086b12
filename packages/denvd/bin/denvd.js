#!/usr/bin/env node
// The `denvd` command (the launcher that brings Node 24 is @denv/protocol's, shared with denv).
import { launch } from "@denv/protocol/node24-launcher";

await launch("denvd", new URL("../src/main.ts", import.meta.url).href);
