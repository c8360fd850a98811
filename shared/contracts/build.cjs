// Compiles the development chain's contracts with the `solc` npm package (the compiler ships inside
// the package: nothing is downloaded) and writes one artifact per contract:
//   node build.cjs <node_modules> <out dir>
// Each artifact is {contractName, abi, bytecode, deployedBytecode}; the chain setup places the
// deployed (runtime) bytecode at the canonical addresses the official x402 clients use.
"use strict";
const fs = require("fs");
const path = require("path");

const [nodeModules, outDir] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error("usage: node build.cjs <node_modules> <out dir>");
  process.exit(2);
}
const solc = require(path.join(path.resolve(nodeModules), "solc"));
const srcDir = path.join(__dirname, "src");
const sources = {};
for (const f of fs.readdirSync(srcDir).filter((f) => f.endsWith(".sol"))) {
  sources[f] = { content: fs.readFileSync(path.join(srcDir, f), "utf8") };
}
const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};
function findImports(p) {
  const file = path.join(path.resolve(nodeModules), p);
  if (!fs.existsSync(file)) return { error: `not found: ${p}` };
  return { contents: fs.readFileSync(file, "utf8") };
}
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
fs.mkdirSync(outDir, { recursive: true });
for (const file of Object.keys(sources)) {
  for (const [name, c] of Object.entries(output.contracts[file] || {})) {
    const artifact = {
      contractName: name,
      compiler: `solc ${solc.version()}`,
      abi: c.abi,
      bytecode: "0x" + c.evm.bytecode.object,
      deployedBytecode: "0x" + c.evm.deployedBytecode.object,
    };
    fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(artifact, null, 1));
  }
}
console.log(`compiled ${Object.keys(sources).length} contracts with solc ${solc.version()} into ${outDir}`);
