// Real GGUF clients on a file (for tests/cli/gguf_view.py):
//   node gguf_client.mjs NODE_MODULES MODEL.gguf TEXT
// prints one JSON line: what @huggingface/gguf parses (metadata, with arrays
// cut to their length and first values; tensor infos), and the token ids
// the real llama.cpp (node-llama-cpp) gives TEXT with the file's vocabulary.
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, text] = process.argv.slice(2);
const load = (m) => import(pathToFileURL(path.join(modules, m)).href);
const {gguf} = await load(path.join("@huggingface", "gguf", "dist", "index.js"));
const {metadata, tensorInfos} = await gguf(modelPath, {allowLocalFile: true});
const plain = (v) => typeof v === "bigint" ? Number(v) : v;
const meta = {};
for (const [k, v] of Object.entries(metadata))
    meta[k] = Array.isArray(v) ? {length: v.length, first: v.slice(0, 8).map(plain)} : plain(v);
const tensors = tensorInfos.map(t => ({name: t.name, shape: t.shape.map(plain), dtype: t.dtype,
                                       offset: plain(t.offset)}));
const {getLlama} = await load(path.join("node-llama-cpp", "dist", "index.js"));
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const tokens = Array.from(model.tokenize(text));
console.log(JSON.stringify({meta, tensors, tokens, detokenized: model.detokenize(tokens)}));
await model.dispose();
