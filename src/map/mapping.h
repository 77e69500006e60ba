/* Mapping files (JSON; the language is documented in mappings/README.md).
 * Parsing checks structure, names, patterns and expression syntax; whether
 * the rules fit a checkpoint is the planner's job. */
#ifndef CK_MAPPING_H
#define CK_MAPPING_H

#include "../ckpt/tensors.h" /* CK_MAX_DIMS */
#include "../util/error.h"
#include "../util/strmap.h"
#include "expr.h"
#include "pattern.h"

enum ck_unused { CK_UNUSED_DEFAULT = -1, CK_UNUSED_ERROR, CK_UNUSED_DROP, CK_UNUSED_KEEP };

/* "optimizer_state": how per-parameter optimizer state keys are treated
 * (src/plan/optstate.h recognises them): named on the target side like the
 * source's (default), by a template with {param} and {state}, dropped, or
 * not recognised at all (every key is a parameter). */
enum ck_opt_mode { CK_OPT_DEFAULT, CK_OPT_TEMPLATE, CK_OPT_DROP, CK_OPT_NONE };

struct ck_named_pat {
	char *name;
	struct ck_pattern pat;
	/* an input its rule's expressions and lets name exactly once, in a rule
	 * without "for" (each evaluated once per instance): the evaluation may
	 * take the instance's value instead of copying it */
	int once;
};

struct ck_named_expr {
	char *name;
	struct ck_expr *expr; /* NULL: the rule's single input, unchanged */
};

/* "each": {"L": "num_hidden_layers", ...}: the keys a rule takes must give
 * every value 0..count-1 of each named capture of its first input, in every
 * combination its "if" keeps, and no other value; a reduced capture must
 * have exactly `count` values in each group. A layer or an expert missing
 * from the source is then an error rather than a smaller model (a Hugging
 * Face loader only warns about missing keys and initialises them at random). */
struct ck_each {
	char *name;
	char *text;	       /* the count as written, for messages */
	struct ck_expr *count; /* config values and params only: decided once */
};

/* "shape": what the rule's parameters say an input's shape is, checked
 * against every key it takes (each tensor of a reduced input): a config
 * that does not describe the checkpoint is an error naming the key, not a
 * layout whose element counts happen to divide. */
struct ck_shape_decl {
	int input; /* index into the rule's in[] */
	int ndim;
	struct ck_expr *dim[CK_MAX_DIMS]; /* NULL: any size */
	char *text;			  /* "[ng * hd, H]", for messages */
};

struct ck_rule {
	int index; /* 1-based, as people count rules in a file */
	char *desc; /* short text for messages: `from "..." -> "..."` */
	struct ck_expr *cond;
	int cond_per_key; /* the condition names a capture: decided for each key */
	int drop; /* a drop rule: inputs consumed, nothing produced */
	struct ck_named_pat *in, *out;
	int n_in, n_out;
	struct ck_named_expr *expr; /* one per output, same order */
	struct ck_named_expr *let;
	int n_let;
	char *reduce[CK_MAX_CAPTURES];
	int n_reduce;
	char *for_name;
	struct ck_expr *for_count;
	int share, optional;
	struct ck_each *each;
	int n_each;
	char *checked; /* "checked": how its layout choices are verified (silences the lint) */
	struct ck_shape_decl *shape;
	int n_shape;
};

/* A partition rule: targets matching `match` are split per dimension over
 * mesh axes (spec[d] = axis name or NULL), each dimension made of blocks[d]
 * equal concatenated blocks that are split separately (Megatron's gated
 * fc1: [gate; up] gives rank r [gate_r; up_r]). First match wins;
 * unmatched targets are replicated. */
struct ck_partition {
	int index;
	struct ck_pattern match;
	int ndim;
	char *spec[CK_MAX_DIMS];
	int64_t blocks[CK_MAX_DIMS];
	struct ck_expr *require; /* must hold (mesh axis sizes are names) */
	int pad;		 /* a dim that does not split is padded with zeros */
	struct ck_expr *pad_to;	 /* "pad": EXPR: padded to a multiple of EXPR x the axis size,
				  * whole views (axis size 1) too: Megatron's padded vocabulary */
	char *message;		 /* said when `require` fails */
};

/* A selection rule: targets matching `match` live on some positions of
 * mesh axis `axis` only. With `split`, the integer value of that capture
 * (a layer, an expert) is divided over the axis in contiguous ranges
 * (pipeline stages; experts of per-expert keys), optionally renumbered to
 * the index within the range; with `stage` (1 first, 2 last) the target is
 * kept on the first or last position (embeddings, output layer). Every
 * matching rule applies. */
struct ck_select {
	int index;
	struct ck_pattern match;
	char *axis;
	char *split;
	int stage;
	struct ck_expr *count; /* values of the capture; NULL: 1 + the largest seen */
	int64_t *bounds;       /* axis size + 1 boundaries, or NULL: even split */
	int n_bounds;
	int renumber;
};

/* "rename": a name the mapping's rules produced that matches `match` becomes
 * `to` (its captures substituted), after the rules and before the
 * partition and select rules look at names; the first entry that matches
 * wins. `cond` ("if") reads config values and params (no captures) and is
 * decided once per plan. For names a framework version spells differently
 * (Megatron's MTP `transformer_layer` / `mtp_model_layer`) without a second
 * copy of every rule. */
struct ck_rename {
	int index;
	struct ck_pattern match, to;
	struct ck_expr *cond;
};

struct ck_mapping {
	char *path;
	char *description;    /* "description", or NULL */
	char **architectures; /* "architectures": the config.json architectures it reads */
	int n_architectures;
	struct ck_partition *parts;
	int n_parts;
	struct ck_select *sels;
	int n_sels;
	struct ck_named_expr *params;
	int n_params;
	struct ck_strmap param_index; /* param name -> its index (names are unique) */
	enum ck_unused unused;
	char **strip_prefixes, **strip_segments;
	int n_strip_prefixes, n_strip_segments;
	char *add_prefix;
	enum ck_opt_mode opt_mode;
	char *opt_template; /* CK_OPT_TEMPLATE: "optimizer.state.{state}.{param}", ... */
	struct ck_rule *rules;
	int n_rules;
	struct ck_rename *renames;
	int n_renames;
};

int ck_mapping_parse(const char *json, size_t len, const char *what, struct ck_mapping **out,
		     struct ck_err *err);
int ck_mapping_load(const char *path, struct ck_mapping **out, struct ck_err *err);
void ck_mapping_free(struct ck_mapping *m);

#endif
