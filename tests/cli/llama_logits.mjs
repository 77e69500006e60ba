// The real llama.cpp (node-llama-cpp's prebuilt CPU binaries, offline):
// load a GGUF and print the raw logits of every position of a token list.
//   node llama_logits.mjs NODE_MODULES MODEL.gguf '[1, 450, ...]'
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, tokensJson] = process.argv.slice(2);
const {getLlama} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
// F32 KV cache: llama.cpp's default F16 cache adds ~4e-4 relative error
const ctx = await model.createContext({contextSize: 64, threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const tokens = JSON.parse(tokensJson);
const res = await ctx.getSequence().controlledEvaluate(tokens.map(t => [t, {generateNext: {logits: true}}]));
const rows = res.map(r => {
    const v = [];
    for (const [t, x] of r.next.logits) v[t] = x;
    return v;
});
console.log(JSON.stringify(rows));
await ctx.dispose();
await model.dispose();
