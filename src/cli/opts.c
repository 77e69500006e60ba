#include "opts.h"

#include <string.h>

#include "../view/gguf_view.h"
#include "cli.h"

const struct ck_cli_opt ck_cli_view_opts[] = {
	{1, "--mapping", "MAP", "a mapping file or a shipped mapping's name (repeatable, in order)"},
	{2, "--mesh", "AXIS=N[,...]", "a tensor-parallel mesh (tp=8, dp=2,tp=4); with --rank"},
	{3, "--rank", "R", "this process's rank in the mesh or of --shard-groups"},
	{4, "--ranks", "LIST", "mount: one daemon for these ranks (0-3, 1,5, all, local); convert --format dcp: one directory for them"},
	{5, "--shard-groups", NULL, "whole dependency groups per process (with --world-size)"},
	{6, "--world-size", "N", "processes of --shard-groups"},
	{7, "--state", "params|optimizer|all", "the parameters or the optimizer state only"},
	{8, "--set", "NAME=VALUE", "a config.json value as mappings see it (repeatable)"},
	{0, NULL, NULL, NULL},
};

const struct ck_cli_opt ck_cli_gguf_opts[] = {
    {CK_CLI_GGUF_PRE, "--gguf-pre", "NAME", "--format gguf: tokenizer.ggml.pre"},
    {CK_CLI_GGUF_VOCAB, "--gguf-vocab", "none",
     "--format gguf: placeholder tokens (token ids only)"},
    {CK_CLI_GGUF_IMATRIX, "--gguf-imatrix", "FILE",
     "--format gguf:Q8_0 or a mix (Q4_0 ... IQ4_XS): llama-quantize's --imatrix (imatrix.gguf or "
     "the legacy .dat)"},
    {CK_CLI_GGUF_PURE, "--gguf-pure", NULL,
     "--format gguf:MIX: every matrix in the mix's base type (llama-quantize's --pure)"},
    {CK_CLI_GGUF_OUTPUT_TYPE, "--gguf-output-type", "TYPE",
     "--format gguf:Q8_0 or a mix: output.weight's type, F32 ... IQ4_XS, MXFP4 (llama-quantize's "
     "--output-tensor-type)"},
    {CK_CLI_GGUF_EMBD_TYPE, "--gguf-embd-type", "TYPE",
     "--format gguf:Q8_0 or a mix: token_embd.weight's type (llama-quantize's "
     "--token-embedding-type)"},
    {CK_CLI_GGUF_LEAVE_OUTPUT, "--gguf-leave-output", NULL,
     "--format gguf:Q8_0 or a mix: output.weight in the source's float type (llama-quantize's "
     "--leave-output-tensor)"},
    {CK_CLI_GGUF_TENSOR_TYPE, "--gguf-tensor-type", "PATTERN=TYPE",
     "--format gguf:Q8_0 or a mix: matrices whose names the ECMAScript regex matches in TYPE; "
     "the first that matches decides (llama-quantize's --tensor-type; repeatable)"},
    {CK_CLI_GGUF_TENSOR_TYPE_FILE, "--gguf-tensor-type-file", "FILE",
     "the same, PATTERN=TYPE entries split by white space (llama-quantize's "
     "--tensor-type-file)"},
    {CK_CLI_GGUF_SPLIT_MAX_SIZE, "--gguf-split-max-size", "SIZE",
     "--format gguf: model-00001-of-0000N.gguf ... of at most SIZE of tensors each (4G: 4e9 "
     "bytes), as gguf-split --split-max-size cuts them"},
    {CK_CLI_GGUF_SPLIT_MAX_TENSORS, "--gguf-split-max-tensors", "N",
     "--format gguf: the same, N tensors each (gguf-split --split-max-tensors)"},
    {CK_CLI_GGUF_OVERRIDE_KV, "--gguf-override-kv", "KEY=TYPE:VALUE",
     "--format gguf: set a metadata pair, TYPE int (u32), float (f32), bool or str "
     "(llama-quantize's --override-kv; repeatable)"},
    {0, NULL, NULL, NULL},
};

int ck_cli_gguf_opt(int id, const char *val, struct ck_gguf_opts *g, struct ck_err *err)
{
	if (id == CK_CLI_GGUF_PRE) {
		g->pre = val;
		return 1;
	}
	if (id == CK_CLI_GGUF_IMATRIX) {
		g->imatrix = val;
		return 1;
	}
	if (id == CK_CLI_GGUF_PURE || id == CK_CLI_GGUF_LEAVE_OUTPUT) {
		*(id == CK_CLI_GGUF_PURE ? &g->pure : &g->leave_output) = 1;
		return 1;
	}
	if (id == CK_CLI_GGUF_OVERRIDE_KV)
		return ck_gguf_opts_add_kv(g, val, err) < 0 ? -1 : 1;
	if (id == CK_CLI_GGUF_TENSOR_TYPE || id == CK_CLI_GGUF_TENSOR_TYPE_FILE)
		return ck_gguf_opts_add_tt(g, val, id == CK_CLI_GGUF_TENSOR_TYPE_FILE, err) < 0 ? -1
												: 1;
	if (id == CK_CLI_GGUF_OUTPUT_TYPE || id == CK_CLI_GGUF_EMBD_TYPE) {
		*(id == CK_CLI_GGUF_OUTPUT_TYPE ? &g->output_type : &g->embd_type) = val;
		return 1;
	}
	if (id == CK_CLI_GGUF_SPLIT_MAX_SIZE || id == CK_CLI_GGUF_SPLIT_MAX_TENSORS)
		return ck_gguf_opts_split(g, id == CK_CLI_GGUF_SPLIT_MAX_TENSORS, val,
					  id == CK_CLI_GGUF_SPLIT_MAX_SIZE
					      ? "--gguf-split-max-size"
					      : "--gguf-split-max-tensors",
					  err) < 0
			   ? -1
			   : 1;
	if (id != CK_CLI_GGUF_VOCAB)
		return 0;
	if (strcmp(val, "none"))
		return ck_fail(err, CK_E_USAGE, "--gguf-vocab: only none (placeholder tokens)");
	g->vocab_none = 1;
	return 1;
}

static const struct ck_cli_opt *find(const struct ck_cli_opt *t, const char *name)
{
	for (; t && t->id; t++)
		if (!strcmp(t->name, name))
			return t;
	return NULL;
}

/* A view option the verb takes: all of them, or --mapping and --set. */
static int takes_view_opt(const struct ck_cli_verb *v, const char *name)
{
	const struct ck_cli_opt *o = v->view ? find(ck_cli_view_opts, name) : NULL;
	return o && (v->view == CK_CLI_VIEW_ALL || !strcmp(o->name, "--mapping") ||
		     !strcmp(o->name, "--set"));
}

int ck_cli_next(const struct ck_cli_verb *v, int argc, char **argv, int *i,
		struct ck_view_args *va, const char **val, struct ck_err *err)
{
	*val = NULL;
	if (*i >= argc)
		return CK_CLI_END;
	const char *a = argv[*i];
	const struct ck_cli_opt *o = find(v->opts, a);
	if (!o)
		o = find(v->gguf, a);
	if (!o && takes_view_opt(v, a)) {
		int r = ck_view_arg(va, argc, argv, i, err);
		++*i;
		return r < 0 ? CK_CLI_ERROR : CK_CLI_VIEW;
	}
	if (!o && a[0] == '-' && a[1]) {
		ck_fail(err, CK_E_USAGE, "%s: unknown option %s (ckptfs %s --help)", v->name, a,
			v->name);
		return CK_CLI_ERROR;
	}
	++*i;
	if (!o) {
		*val = a;
		return CK_CLI_OPERAND;
	}
	if (o->arg) {
		if (*i >= argc) {
			ck_fail(err, CK_E_USAGE, "%s needs a value (%s)", a, o->arg);
			return CK_CLI_ERROR;
		}
		*val = argv[(*i)++];
	}
	return o->id;
}

/* "VERB OPERANDS [--name ARG]...", wrapped at 78 columns (indent > 0) or on
 * one line; the view options as one "[--mapping MAP]... [VIEW OPTIONS]". */
static size_t synopsis(char *buf, size_t cap, const struct ck_cli_verb *v, int indent)
{
	size_t n = (size_t)snprintf(buf, cap, "%s%s%s", v->name, *v->operands ? " " : "",
				    v->operands),
	       line = n + 2;
	for (const struct ck_cli_opt *o = v->opts; o; o = o->id ? o + 1 : NULL) {
		char one[128];
		if (o->id)
			snprintf(one, sizeof one, " [%s%s%s]", o->name, o->arg ? " " : "",
				 o->arg ? o->arg : "");
		else if (v->view == CK_CLI_VIEW_ALL)
			snprintf(one, sizeof one, " [--mapping MAP]... [VIEW OPTIONS]");
		else if (v->view)
			snprintf(one, sizeof one, " [--mapping MAP]... [--set NAME=VALUE]...");
		else
			break;
		size_t len = strlen(one);
		if (indent && line + len > 78) {
			n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, "\n%*s",
					      indent, "");
			line = (size_t)indent;
		}
		n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, "%s", one);
		line += len;
	}
	return n;
}

const char *ck_cli_opt_name(const struct ck_cli_opt *t, int id)
{
	for (; t->id; t++)
		if (t->id == id)
			return t->name;
	return "?";
}

int ck_cli_usage_error(const struct ck_cli_verb *v, struct ck_err *err)
{
	return ck_fail(err, CK_E_USAGE, "usage: ckptfs %s%s%s [OPTIONS] (ckptfs %s --help lists them)",
		       v->name, *v->operands ? " " : "", v->operands, v->name);
}

#define HELP_COL 30

void ck_cli_print_wrapped(FILE *f, const char *head, const char *help)
{
	int col = fprintf(f, "    %s", head);
	if (col >= HELP_COL - 1) {
		fputc('\n', f);
		col = 0;
	}
	fprintf(f, "%*s", HELP_COL - col, "");
	col = HELP_COL;
	for (const char *w = help; *w;) {
		int len = (int)strcspn(w, " ");
		if (col > HELP_COL && col + 1 + len > 78) {
			fprintf(f, "\n%*s", HELP_COL, "");
			col = HELP_COL;
		} else if (col > HELP_COL) {
			fputc(' ', f);
			col++;
		}
		fwrite(w, 1, (size_t)len, f);
		col += len;
		w += len;
		w += strspn(w, " ");
	}
	fputc('\n', f);
}

static void print_opts(FILE *f, const struct ck_cli_opt *o, int view)
{
	for (; o && o->id; o++) {
		if (view == CK_CLI_VIEW_MAPS && strcmp(o->name, "--mapping") && strcmp(o->name, "--set"))
			continue;
		char head[96];
		snprintf(head, sizeof head, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		if (strlen(head) > 28)
			fprintf(f, "    %s\n    %-28s %s\n", head, "", o->help);
		else
			fprintf(f, "    %-28s %s\n", head, o->help);
	}
}

void ck_cli_print_help(FILE *f, const struct ck_cli_verb *v, int options)
{
	char buf[2048];
	synopsis(buf, sizeof buf, v, 9);
	fprintf(f, "  %s\n%s", buf, v->what);
	if (!options)
		return;
	fprintf(f, "options:\n");
	print_opts(f, v->opts, 0);
	print_opts(f, v->gguf, 0);
	if (v->view) {
		fprintf(f, "view options:\n");
		print_opts(f, ck_cli_view_opts, v->view);
	}
	if (v->more_help)
		v->more_help(f);
}
