/* mkckpt: write a deterministic test checkpoint (see tools/ckgen.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/ckgen.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: mkckpt [options] OUTDIR\n"
	    "  --model NAME                 llama (default) gpt2 mixtral qwen2 qwen3 qwen3-moe\n"
	    "                               qwen2-moe olmo2 phi3 gemma gemma2 gemma3\n"
	    "                               deepseek-v3 gpt-oss. qwen2: Q/K/V biases;\n"
	    "                               qwen3: Q/K norms, explicit head_dim; qwen3-moe:\n"
	    "                               qwen3 with a router and per-expert MLPs; qwen2-moe:\n"
	    "                               qwen2 with a router, per-expert MLPs and a gated\n"
	    "                               shared expert of intermediate_size; olmo2: Q/K\n"
	    "                               norms over the whole projections, norms after\n"
	    "                               attention and MLP (none before); phi3:\n"
	    "                               fused qkv_proj and gate_up_proj; gemma: head_dim 256,\n"
	    "                               tied; gemma2: gemma with pre/post feed-forward\n"
	    "                               norms; gemma3: gemma2 with Q/K norms;\n"
	    "                               deepseek-v3: MLA, dense first layers, routed and\n"
	    "                               shared experts, router bias, the MTP layer;\n"
	    "                               gpt-oss: attention biases and sinks, router bias,\n"
	    "                               MXFP4 experts (gate/up rows interleaved)\n"
	    "  --preset NAME                llama: tiny small 1b 8b 70b; gpt2: tiny 124m;\n"
	    "                               mixtral: tiny 8x7b; qwen2: tiny 7b; qwen3: tiny 8b;\n"
	    "                               qwen3-moe: tiny 30b-a3b 235b-a22b; qwen2-moe: tiny\n"
	    "                               a2.7b; olmo2: tiny 7b; phi3: tiny mini\n"
	    "                               medium; gemma: tiny 2b 7b; gemma2: tiny 2b 9b;\n"
	    "                               gemma3: tiny 1b 27b; deepseek-v3: tiny 671b\n"
	    "                               (671b: BF16 + FP8 128x128 blocks); gpt-oss: tiny 20b\n"
	    "                               120b (BF16 + MXFP4 experts) (default tiny)\n"
	    "  --dtype F32|BF16|F16         element type (default F32)\n"
	    "  --shards N                   N files + model.safetensors.index.json\n"
	    "  --sparse                     headers only; data left as file holes\n"
	    "  --layers N --hidden N --intermediate N --heads N --kv-heads N\n"
	    "  --vocab N --experts N --head-dim N --tie --untie --prefix STR\n"
	    "  --moe-intermediate N --shared-experts N --first-dense N --mtp-layers N\n"
	    "  --q-lora N                   MoE and MLA sizes (q-lora 0: a plain q_proj)\n"
	    "  --fp8-block B                layer weights as F8_E4M3 + F32 weight_scale_inv\n"
	    "                               per BxB block (DeepSeek-V3 style)\n"
	    "  --no-mxfp4                   gpt-oss experts as BF16 gate_up_proj [E, H, 2I] and\n"
	    "                               down_proj [E, I, H] (transformers' dequantised form)\n"
	    "Element i of tensor KEY is ((splitmix64(fnv1a64(KEY) + i) %% 255) - 127) / 64;\n"
	    "(DeepSeek's MTP layer: embed_tokens and shared_head.head copy model.embed_tokens\n"
	    "and lm_head, as DeepSeek's checkpoints share them);\n"
	    "MXFP4 block bytes are splitmix64(fnv1a64(KEY) + i) & 255, E8M0 scale codes\n"
	    "120 + splitmix64(fnv1a64(KEY) + i) %% 9.\n");
}

static int64_t num(const char *s)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < 0) {
		fprintf(stderr, "mkckpt: not a non-negative integer: %s\n", s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	enum { O_LAYERS = 256, O_HIDDEN, O_INTER, O_HEADS, O_KV, O_VOCAB, O_EXPERTS, O_HD,
	       O_TIE, O_UNTIE, O_PREFIX, O_SPARSE, O_FP8, O_MOEI, O_SHARED, O_DENSE, O_MTP,
	       O_QLORA, O_NOMX };
	static const struct option opts[] = {
		{"model", required_argument, 0, 'm'}, {"preset", required_argument, 0, 'p'},
		{"dtype", required_argument, 0, 'd'}, {"shards", required_argument, 0, 's'},
		{"sparse", no_argument, 0, O_SPARSE}, {"fp8-block", required_argument, 0, O_FP8}, {"layers", required_argument, 0, O_LAYERS},
		{"hidden", required_argument, 0, O_HIDDEN},
		{"intermediate", required_argument, 0, O_INTER},
		{"heads", required_argument, 0, O_HEADS}, {"kv-heads", required_argument, 0, O_KV},
		{"vocab", required_argument, 0, O_VOCAB},
		{"experts", required_argument, 0, O_EXPERTS},
		{"head-dim", required_argument, 0, O_HD}, {"tie", no_argument, 0, O_TIE},
		{"untie", no_argument, 0, O_UNTIE}, {"prefix", required_argument, 0, O_PREFIX},
		{"moe-intermediate", required_argument, 0, O_MOEI},
		{"shared-experts", required_argument, 0, O_SHARED},
		{"first-dense", required_argument, 0, O_DENSE},
		{"mtp-layers", required_argument, 0, O_MTP}, {"q-lora", required_argument, 0, O_QLORA},
		{"no-mxfp4", no_argument, 0, O_NOMX},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *model = "llama", *preset = "tiny";
	/* first pass: model and preset, so overrides apply on top of the preset */
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'm')
			model = optarg;
		else if (c == 'p')
			preset = optarg;
		else if (c == 'h') {
			usage(stdout);
			return 0;
		} else if (c == '?') {
			usage(stderr);
			return 2;
		}
	}
	struct ck_err err;
	struct ckgen_spec s;
	if (ckgen_preset(&s, model, preset, &err) < 0) {
		fprintf(stderr, "mkckpt: %s\n", err.msg);
		return 2;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			s.dtype = ck_dtype_parse(optarg, NULL);
			if (s.dtype != CK_DT_F32 && s.dtype != CK_DT_BF16 && s.dtype != CK_DT_F16) {
				fprintf(stderr, "mkckpt: --dtype must be F32, BF16 or F16\n");
				return 2;
			}
			break;
		case 's': s.shards = (int)num(optarg); break;
		case O_SPARSE: s.sparse = 1; break;
		case O_FP8: s.fp8_block = num(optarg); break;
		case O_LAYERS: s.layers = num(optarg); break;
		case O_HIDDEN: s.hidden = num(optarg); break;
		case O_INTER: s.intermediate = num(optarg); break;
		case O_HEADS: s.heads = num(optarg); break;
		case O_KV: s.kv_heads = num(optarg); break;
		case O_VOCAB: s.vocab = num(optarg); break;
		case O_EXPERTS: s.experts = num(optarg); break;
		case O_HD: s.head_dim = num(optarg); break;
		case O_TIE: s.tie = 1; break;
		case O_UNTIE: s.tie = 0; break;
		case O_MOEI: s.moe_intermediate = num(optarg); break;
		case O_SHARED: s.shared_experts = num(optarg); break;
		case O_DENSE: s.first_dense = num(optarg); break;
		case O_MTP: s.mtp_layers = num(optarg); break;
		case O_QLORA: s.q_lora = num(optarg); break;
		case O_NOMX: s.mxfp4 = 0; break;
		case O_PREFIX: snprintf(s.prefix, sizeof s.prefix, "%s", optarg); break;
		default: break;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	if (ckgen_write(&s, argv[optind], &err) < 0) {
		fprintf(stderr, "mkckpt: %s\n", err.msg);
		return err.kind == CK_E_USAGE ? 2 : 1;
	}
	return 0;
}
