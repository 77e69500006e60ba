// The real llama.cpp (node-llama-cpp's prebuilt CPU binaries, offline):
// load a GGUF and print the raw logits of every position of a token list.
//   node llama_logits.mjs NODE_MODULES MODEL.gguf '[1, 450, ...]'
//   node llama_logits.mjs NODE_MODULES --serve
// --serve answers one request per stdin line, {"model": PATH, "tokens": [...]},
// with one line of logits (or {"error": MESSAGE}): the tests ask dozens of
// models, and starting llama.cpp's backends took 2.3 s of each call.
import path from "node:path";
import readline from "node:readline";
import {pathToFileURL} from "node:url";

const [modules, modelPath, tokensJson] = process.argv.slice(2);
const {getLlama} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true});

async function logits(file, tokens) {
    const model = await llama.loadModel({modelPath: file, gpuLayers: 0});
    try {
        // F32 KV cache: llama.cpp's default F16 cache adds ~4e-4 relative error
        const ctx = await model.createContext({contextSize: 64, threads: 1, flashAttention: false,
            experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
        try {
            const res = await ctx.getSequence().controlledEvaluate(
                tokens.map(t => [t, {generateNext: {logits: true}}]));
            return res.map(r => {
                const v = [];
                for (const [t, x] of r.next.logits) v[t] = x;
                return v;
            });
        } finally {
            await ctx.dispose();
        }
    } finally {
        await model.dispose(); // before the test unmounts the file
    }
}

if (modelPath !== "--serve") {
    console.log(JSON.stringify(await logits(modelPath, JSON.parse(tokensJson))));
} else {
    for await (const line of readline.createInterface({input: process.stdin})) {
        let out;
        try {
            const req = JSON.parse(line);
            out = await logits(req.model, req.tokens);
        } catch (e) {
            out = {error: String(e && e.stack || e)};
        }
        process.stdout.write(JSON.stringify(out) + "\n");
    }
}
