/* The GGUF view: a Hugging Face checkpoint served as the model.gguf
 * llama.cpp loads. The architecture (config.json) picks a shipped mapping
 * to llama.cpp's names (hf-llama-to-gguf, ..., with the Q/K rope
 * permutation as a view/transpose), applied after the user's mappings; the
 * target types follow llama.cpp's converter (1-D tensors and the MoE router
 * F32, rows that are not whole 32-element blocks F16, the rest TYPE, Q8_0
 * and Q4_0 quantized on read); the metadata comes from config.json and the
 * tokenizer files, or a GGUF source's own tokenizer records (a GGUF source
 * with no mapping given goes through its class's mapping to HF names
 * first). Only shapes are needed: nothing is read to lay it out. */
#ifndef CK_GGUF_VIEW_H
#define CK_GGUF_VIEW_H

#include "../ckpt/imatrix.h"
#include "../ckpt/tokenizer.h"
#include "../plan/gguf_out.h"
#include "../plan/plan.h"
#include "gguf_kv.h"

#define CK_GGUF_MAX_TT 64

struct ck_gguf_opts {
	int on;		  /* -o gguf */
	const char *type; /* F32 ... Q6_K (TYPE_LIST); NULL: the source's float type */
	const char *pre;  /* gguf_pre=NAME: the BPE pre-tokenizer's name */
	int vocab_none;	  /* gguf_vocab=none: placeholder tokens */
	const char *imatrix; /* gguf_imatrix=FILE: llama-quantize's --imatrix */
	/* llama-quantize's --pure (every matrix the type's own, no mix),
	 * --output-tensor-type and --token-embedding-type */
	int pure;		 /* gguf_pure */
	const char *output_type; /* gguf_output_type=TYPE */
	const char *embd_type;	 /* gguf_embd_type=TYPE */
	int leave_output;	 /* gguf_leave_output: --leave-output-tensor */
	/* gguf-split's --split-max-size and --split-max-tensors (one of them;
	 * 0: not given): model-00001-of-0000N.gguf ... instead of model.gguf */
	uint64_t split_max_size, split_max_tensors;
	/* --tensor-type PATTERN=TYPE (gguf_tensor_type=) and --tensor-type-file
	 * FILE (gguf_tensor_type_file=: file 1), in the order given */
	struct {
		const char *arg;
		int file;
	} tt[CK_GGUF_MAX_TT];
	int n_tt;
	/* --override-kv KEY=TYPE:VALUE (gguf_override_kv=), in the order given */
	const char *kv[CK_GGUF_MAX_KV];
	int n_kv;
};

/* Any gguf sub-option given (they need the view: -o gguf, --format gguf). */
int ck_gguf_opts_used(const struct ck_gguf_opts *o);
/* gguf-split's limit val (a size, or a count when tensors) for option
 * opt; refused: not a positive number, or both limits. */
int ck_gguf_opts_split(struct ck_gguf_opts *o, int tensors, const char *val, const char *opt,
		       struct ck_err *err);
/* Add a --gguf-tensor-type (file 0) or --gguf-tensor-type-file; refused
 * past CK_GGUF_MAX_TT (a file holds any number). */
int ck_gguf_opts_add_tt(struct ck_gguf_opts *o, const char *arg, int file, struct ck_err *err);
/* Add a --gguf-override-kv, checked as it comes; refused past
 * CK_GGUF_MAX_KV. */
int ck_gguf_opts_add_kv(struct ck_gguf_opts *o, const char *arg, struct ck_err *err);

struct ck_gguf_view {
	struct ck_plan *plan; /* targets with GGUF names and types */
	struct ck_vfile file; /* model.gguf over plan's targets */
	struct ck_vfile *split; /* or its gguf-split pieces, when asked for */
	size_t n_split;
	char (*split_names)[32]; /* model-00001-of-00003.gguf ... */
	const char **names;	 /* the served files' names: model.gguf, or those */
	struct ck_gguf_meta meta;
	struct ck_vocab vocab;
	const char *arch;  /* general.architecture */
	const char *type;  /* the file's type (general.file_type's name) */
	int by_quantize;   /* Q8_0 with llama-quantize's options: its file, not the converter's */
	struct ck_mapping *arch_map;
	struct ck_mapping *unwrap_map; /* a vision-language class's, or NULL */
	struct ck_mapping *source_map; /* a GGUF source's to HF names, or NULL */
	cJSON *config;	       /* the text model's config with its defaults, when made */
	uint64_t header_bytes; /* header, metadata, infos and padding */
	struct ck_gguf_extra extra[2]; /* tensors computed from config.json */
	size_t n_extra;
	struct ck_imatrix imx; /* the importance matrix, when given */
	size_t imx_used;       /* tensors it weighs */
};

/* "F32" ... "Q4_0" (any case): 0, or -1 with err naming the option. */
int ck_gguf_check_type(const char *type, struct ck_err *err);
/* --format safetensors | gguf | gguf:TYPE (convert, inspect): sets o->on
 * and o->type for gguf. */
int ck_gguf_parse_format(const char *format, struct ck_gguf_opts *o, struct ck_err *err);
/* Build the view of cat through maps (the user's, applied first). */
int ck_gguf_view_open(const struct ck_catalog *cat, struct ck_mapping *const *maps, int n_maps,
		      const struct ck_gguf_opts *o, struct ck_gguf_view *g, struct ck_err *err);
void ck_gguf_view_free(struct ck_gguf_view *g);
/* The files the view serves or writes: model.gguf, or the split's pieces. */
size_t ck_gguf_view_n_files(const struct ck_gguf_view *g);
const char *const *ck_gguf_view_names(const struct ck_gguf_view *g);
const struct ck_vfile *ck_gguf_view_files(const struct ck_gguf_view *g);
/* Put the files' target parts in another plan's numbering (ck_vfile_renumber). */
void ck_gguf_view_renumber(struct ck_gguf_view *g, const uint32_t *idx);

#endif
