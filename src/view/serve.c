#include "serve.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../exec/io.h"
#include "../util/crc32.h"
#include "../util/fileio.h"
#include "../util/parallel.h"
#include "../util/size.h"

#define MIN_CACHE_CHUNKS 4 /* room for a reader, a prefetch and an eviction */
#define DEFAULT_CHUNK ((uint64_t)4 << 20)
#define MAX_CHUNK ((uint64_t)256 << 20)

void ck_serve_opts_init(struct ck_serve_opts *o)
{
	memset(o, 0, sizeof *o);
	o->cache.use_uring = 1;
	o->cache.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	o->part_size = (uint64_t)5 << 30; /* vLLM's default max file size */
	ck_device_init(&o->device);
}

static int bad(struct ck_err *err, const char *how, const char *opt, const char *want)
{
	return ck_fail(err, CK_E_USAGE, "bad option %s%s (%s)", how, opt, want);
}

/* A size option: *out, above 0 unless zero_ok. */
static int size_opt(const char *how, const char *opt, const char *val, uint64_t *out, int zero_ok,
		    struct ck_err *err)
{
	if (!val || ck_parse_size(val, out) < 0 || (!zero_ok && !*out))
		return bad(err, how, opt, zero_ok ? "a size" : "a size above 0");
	return 1;
}

enum {
	S_ZIP_CRC = 1,
	S_NPY_F32,
	S_NO_DIRECT,
	S_NO_PREFETCH,
	S_NO_URING,
	S_DCP,
	S_TORCH_DIST,
	S_CACHE_SIZE,
	S_CHUNK,
	S_GROUP_MAX,
	S_MAX_SHARD,
	S_PART_SIZE,
	S_GPU_MEM,
	S_GPU_MIN,
	S_THREADS,
	S_EVAL_DELAY,
	S_GGUF_DEQUANT,
	S_GGUF,
	S_GGUF_PRE,
	S_GGUF_VOCAB,
	S_GGUF_IMATRIX,
	S_GGUF_PURE,
	S_GGUF_OUTPUT_TYPE,
	S_GGUF_EMBD_TYPE,
	S_GGUF_LEAVE_OUTPUT,
	S_GGUF_TENSOR_TYPE,
	S_GGUF_TENSOR_TYPE_FILE,
	S_GGUF_SPLIT_MAX_SIZE,
	S_GGUF_SPLIT_MAX_TENSORS,
	S_GGUF_OVERRIDE_KV,
	S_DEVICE,
	S_ODIRECT,
	S_NO_STREAM,
	S_READ_ONCE
};

const struct ck_serve_optdef ck_serve_optdefs[] = {
    {S_CACHE_SIZE, "cache_size", "SIZE",
     "evaluated bytes kept (default: 1/4 of the cgroup's memory.max, else of RAM, at least "
     "64MiB; never less than 4 chunks)"},
    {S_THREADS, "threads", "N",
     "evaluator threads, each with its own io_uring ring (default: one per core)"},
    {S_CHUNK, "chunk", "SIZE", "bytes of a tensor per cache entry (default 4MiB; 4KiB to 256MiB)"},
    {S_GROUP_MAX, "group_max", "SIZE",
     "dependency groups up to this size are evaluated whole on first read (default: "
     "cache_size/8, at most 256MiB)"},
    {S_NO_URING, "no_uring", NULL, "read sources with pread instead of io_uring"},
    {S_ODIRECT, "odirect", NULL,
     "read source files with O_DIRECT, bypassing the page cache (a checkpoint larger than "
     "memory, read once from disk): aligned 1MiB reads, 8 in flight per evaluator, renamed "
     "tensors as the kernel's readahead asks; files on a file system without O_DIRECT "
     "(ramfs) are read buffered, and the log says so"},
    {S_MAX_SHARD, "max_shard_size", "SIZE",
     "also serve model-0000k-of-0000n.safetensors shards of at most SIZE and "
     "model.safetensors.index.json"},
    {S_PART_SIZE, "part_size", "SIZE",
     "per-rank views: size of model-rank-R-part-P.safetensors (vLLM's sharded_state layout; "
     "default 5GiB)"},
    {S_ZIP_CRC, "zip_crc", NULL,
     "fill in pytorch_model.bin's CRC-32 fields (evaluates every tensor before the view is "
     "ready; default: CRCs are 0)"},
    {S_NO_DIRECT, "no_direct", NULL,
     "evaluate renamed tensors through the cache too (default: they are read straight from "
     "their source file)"},
    {S_NO_STREAM, "no_stream", NULL,
     "evaluate every read through the cache (default: a read of a tensor whose bytes come "
     "from its sources in order, a cast or fused blocks, is evaluated straight into its "
     "reply)"},
    {S_READ_ONCE, "read_once", NULL,
     "the reader keeps what it reads (a loader copying each tensor once): an evaluated chunk "
     "read whole is a spare, dropped early and its memory reused for the next (a mount does "
     "this unless direct_io: the kernel's page cache keeps the bytes)"},
    {S_NO_PREFETCH, "no_prefetch", NULL,
     "do not evaluate the next group ahead of a reader that starts a tensor (default: one "
     "group ahead, within half the cache)"},
    {S_NPY_F32, "npy_f32", NULL,
     "npy/ serves BF16 and FP8 tensors widened to float32 (default: raw '<V2' / '|V1' "
     "elements)"},
    {S_DEVICE, "device", "cpu|cuda|cuda:N|auto",
     "where casts, transposes and block scales run (default cpu; cuda: the local rank's GPU)"},
    {S_GPU_MEM, "gpu_mem", "SIZE", "device memory for the CUDA lanes (default 1GiB)"},
    {S_GPU_MIN, "gpu_min", "SIZE", "smaller reads stay on the CPU (default 256KiB)"},
    {S_GGUF_DEQUANT, "gguf_dequant", "F32|BF16", "quantized GGUF tensors decoded to (default F32)"},
    {S_GGUF, "gguf", "[TYPE]",
     "also serve model.gguf for llama.cpp: Llama, Mistral, Mixtral, Qwen2, Qwen3, Gemma, Phi-3, "
     "...; TYPE F32, F16, BF16, Q8_0 or llama-quantize's mixes Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, "
     "Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE "
     "(default: the "
     "source's float type; quantized on read)"},
    {S_GGUF_PRE, "gguf_pre", "NAME",
     "the BPE pre-tokenizer llama.cpp should use (default: from tokenizer.json's split "
     "pattern)"},
    {S_GGUF_VOCAB, "gguf_vocab", "none",
     "placeholder tokens when there is no tokenizer file (token ids only)"},
    {S_GGUF_IMATRIX, "gguf_imatrix", "FILE",
     "gguf=Q8_0 or a mix (Q4_0 ... IQ4_XS) quantized with this importance matrix (llama-quantize's "
     "--imatrix: imatrix.gguf or the legacy .dat)"},
    {S_GGUF_PURE, "gguf_pure", NULL,
     "gguf=MIX with every matrix in the mix's base type (llama-quantize's --pure)"},
    {S_GGUF_OUTPUT_TYPE, "gguf_output_type", "TYPE",
     "gguf=Q8_0 or a mix with output.weight in TYPE, F32 ... IQ4_XS (llama-quantize's "
     "--output-tensor-type)"},
    {S_GGUF_EMBD_TYPE, "gguf_embd_type", "TYPE",
     "gguf=Q8_0 or a mix with token_embd.weight in TYPE (llama-quantize's "
     "--token-embedding-type)"},
    {S_GGUF_LEAVE_OUTPUT, "gguf_leave_output", NULL,
     "gguf=Q8_0 or a mix with output.weight in the source's float type (llama-quantize's "
     "--leave-output-tensor)"},
    {S_GGUF_TENSOR_TYPE, "gguf_tensor_type", "PATTERN=TYPE",
     "gguf=Q8_0 or a mix with the matrices whose names the ECMAScript regex matches in TYPE, "
     "the first that matches deciding (llama-quantize's --tensor-type; repeatable; in a "
     "mount's -o list a comma as \\,)"},
    {S_GGUF_TENSOR_TYPE_FILE, "gguf_tensor_type_file", "FILE",
     "the same, PATTERN=TYPE entries split by white space (llama-quantize's "
     "--tensor-type-file)"},
    {S_GGUF_SPLIT_MAX_SIZE, "gguf_split_max_size", "SIZE",
     "model-00001-of-0000N.gguf ... instead of model.gguf, at most SIZE of tensors each, as "
     "gguf-split --split-max-size cuts them (llama.cpp loads the first)"},
    {S_GGUF_SPLIT_MAX_TENSORS, "gguf_split_max_tensors", "N",
     "the same, N tensors each (gguf-split --split-max-tensors)"},
    {S_GGUF_OVERRIDE_KV, "gguf_override_kv", "KEY=TYPE:VALUE",
     "a metadata pair of model.gguf, TYPE int (u32), float (f32), bool or str (llama-quantize's "
     "--override-kv; repeatable; in a mount's -o list a comma as \\,)"},
    {S_DCP, "dcp", NULL,
     "dcp/, the view as a PyTorch Distributed Checkpoint (.metadata, __R_0.distcp), laid out "
     "at start: a view it cannot show is refused (a mount shows dcp/ anyway, laid out on "
     "first use; with --ranks, one dcp/ for all the ranks)"},
    {S_TORCH_DIST, "torch_dist", NULL,
     "also serve torch_dist/: the same for Megatron-core (with metadata.json and common.pt)"},
    {S_EVAL_DELAY, "eval_delay_ms", "N", "testing: delay every evaluation"},
    {0, NULL, NULL, NULL},
};

const struct ck_serve_optdef *ck_serve_optdef_find(const struct ck_serve_optdef *t, const char *opt,
						   size_t klen)
{
	for (; t->id; t++)
		if (strlen(t->name) == klen && !strncmp(opt, t->name, klen))
			return t;
	return NULL;
}

/* An option of the table with its value checked against its kind: a flag
 * has none, a valued option has one unless its value is optional ("[TYPE]"). */
static int serve_value(struct ck_serve_opts *o, int id, const char *how, const char *opt,
		       const char *val, struct ck_err *err);

int ck_serve_option(struct ck_serve_opts *o, const char *how, const char *opt, struct ck_err *err)
{
	const char *eq = strchr(opt, '=');
	const struct ck_serve_optdef *d =
		ck_serve_optdef_find(ck_serve_optdefs, opt, eq ? (size_t)(eq - opt) : strlen(opt));
	if (!d)
		return 0;
	if (!d->arg && eq)
		return bad(err, how, opt, "a flag takes no value");
	return serve_value(o, d->id, how, opt, eq ? eq + 1 : NULL, err);
}

static int serve_value(struct ck_serve_opts *o, int id, const char *how, const char *opt,
		       const char *val, struct ck_err *err)
{
	switch (id) {
	case S_ZIP_CRC: o->zip_crc = 1; return 1;
	case S_NPY_F32: o->npy_f32 = 1; return 1;
	case S_NO_DIRECT: o->cache.no_direct = 1; return 1;
	case S_NO_PREFETCH: o->cache.no_prefetch = 1; return 1;
	case S_NO_STREAM: o->cache.no_stream = 1; return 1;
	case S_READ_ONCE: o->cache.drop_served = 1; return 1;
	case S_NO_URING: o->cache.use_uring = 0; return 1;
	case S_ODIRECT: o->cache.odirect = 1; return 1;
	case S_DCP:
	case S_TORCH_DIST:
		if (o->dcp && o->dcp != (id == S_DCP ? 1 : 2))
			return bad(err, how, opt, "one of dcp and torch_dist");
		o->dcp = id == S_DCP ? 1 : 2;
		return 1;
	case S_CACHE_SIZE: return size_opt(how, opt, val, &o->cache.cache_size, 0, err);
	case S_CHUNK:
		if (!val || ck_parse_size(val, &o->cache.chunk) < 0 || o->cache.chunk < 4096 ||
		    o->cache.chunk > MAX_CHUNK)
			return bad(err, how, opt, "4KiB to 256MiB");
		return 1;
	case S_GROUP_MAX: return size_opt(how, opt, val, &o->cache.group_max, 1, err);
	case S_MAX_SHARD: return size_opt(how, opt, val, &o->max_shard_size, 0, err);
	case S_PART_SIZE: return size_opt(how, opt, val, &o->part_size, 0, err);
	case S_GPU_MEM: return size_opt(how, opt, val, &o->device.gpu_mem, 0, err);
	case S_GPU_MIN: return size_opt(how, opt, val, &o->device.gpu_min, 1, err);
	case S_THREADS:
	case S_EVAL_DELAY: {
		char *end;
		long v = val ? strtol(val, &end, 10) : -1;
		long max = id == S_THREADS ? 64 : 600000;
		if (!val || !*val || *end || v < 1 || v > max)
			return bad(err, how, opt, id == S_THREADS ? "1 to 64" : "1 to 600000");
		if (id == S_THREADS)
			o->cache.threads = (int)v;
		else
			o->cache.delay_ms = (unsigned)v;
		return 1;
	}
	case S_GGUF_DEQUANT:
		if (!val || (strcasecmp(val, "F32") && strcasecmp(val, "BF16")))
			return bad(err, how, opt, "F32 or BF16");
		o->gguf_bf16 = !strcasecmp(val, "BF16");
		return 1;
	case S_GGUF:
		if (val && ck_gguf_check_type(val, err) < 0)
			return bad(
			    err, how, opt,
			    "F32, F16, BF16, Q8_0 or a llama-quantize mix (Q4_0, Q4_1, Q5_0, "
			    "Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, "
			    "Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE)");
		o->gguf.on = 1;
		o->gguf.type = val;
		return 1;
	case S_GGUF_PRE:
		if (!val || !*val || strlen(val) > 64)
			return bad(err, how, opt, "a pre-tokenizer name, such as llama-bpe or qwen2");
		o->gguf.pre = val;
		return 1;
	case S_GGUF_IMATRIX:
		if (!val || !*val)
			return bad(err, how, opt, "the importance matrix file");
		o->gguf.imatrix = val;
		return 1;
	case S_GGUF_PURE: o->gguf.pure = 1; return 1;
	case S_GGUF_LEAVE_OUTPUT: o->gguf.leave_output = 1; return 1;
	case S_GGUF_SPLIT_MAX_SIZE:
	case S_GGUF_SPLIT_MAX_TENSORS:
		return ck_gguf_opts_split(&o->gguf, id == S_GGUF_SPLIT_MAX_TENSORS, val,
					  id == S_GGUF_SPLIT_MAX_TENSORS
					      ? "-o gguf_split_max_tensors"
					      : "-o gguf_split_max_size",
					  err) < 0
			   ? -1
			   : 1;
	case S_GGUF_OVERRIDE_KV:
		if (!val || !*val)
			return bad(err, how, opt, "KEY=TYPE:VALUE");
		return ck_gguf_opts_add_kv(&o->gguf, val, err) < 0 ? -1 : 1;
	case S_GGUF_TENSOR_TYPE:
	case S_GGUF_TENSOR_TYPE_FILE:
		if (!val || !*val)
			return bad(err, how, opt,
				   id == S_GGUF_TENSOR_TYPE ? "PATTERN=TYPE"
							    : "the patterns' file");
		return ck_gguf_opts_add_tt(&o->gguf, val, id == S_GGUF_TENSOR_TYPE_FILE, err) < 0
			   ? -1
			   : 1;
	case S_GGUF_OUTPUT_TYPE:
	case S_GGUF_EMBD_TYPE:
		if (!val || !*val)
			return bad(err, how, opt, "a ggml type, F32 ... IQ4_XS");
		*(id == S_GGUF_OUTPUT_TYPE ? &o->gguf.output_type : &o->gguf.embd_type) = val;
		return 1;
	case S_GGUF_VOCAB:
		if (!val || strcmp(val, "none"))
			return bad(err, how, opt, "none: placeholder tokens");
		o->gguf.vocab_none = 1;
		return 1;
	default: /* S_DEVICE */
		if (!val)
			return bad(err, how, opt, "cpu, cuda, cuda:N or auto");
		return ck_device_parse(val, &o->device, err) < 0 ? -1 : 1;
	}
}

/* A quarter of the memory this process may use. */
static uint64_t default_cache_size(void)
{
	uint64_t mem = 0;
	FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
	if (f) {
		unsigned long long v;
		if (fscanf(f, "%llu", &v) == 1)
			mem = v;
		fclose(f);
	}
	if (!mem && (f = fopen("/proc/meminfo", "r"))) {
		unsigned long long kb;
		if (fscanf(f, "MemTotal: %llu kB", &kb) == 1)
			mem = kb * 1024;
		fclose(f);
	}
	uint64_t c = mem / 4;
	return c < (64u << 20) ? (64u << 20) : c;
}

int ck_serve_opts_finish(struct ck_serve_opts *o, struct ck_err *err)
{
	if (!o->cache.cache_size)
		o->cache.cache_size = default_cache_size();
	uint64_t chunk = o->cache.chunk ? o->cache.chunk : DEFAULT_CHUNK;
	if (o->cache.cache_size < MIN_CACHE_CHUNKS * chunk)
		return ck_fail(err, CK_E_USAGE,
			       "cache_size=%llu is less than 4 chunks of %llu bytes (lower chunk, or "
			       "raise cache_size)",
			       (unsigned long long)o->cache.cache_size, (unsigned long long)chunk);
	if (!o->cache.group_max) {
		o->cache.group_max = o->cache.cache_size / 8;
		if (o->cache.group_max > (256u << 20))
			o->cache.group_max = 256u << 20;
	}
	return 0;
}

int ck_serve_cast_view(const struct ck_serve_opts *o, struct ck_view *v, struct ck_err *err)
{
	if (!o->gguf_bf16)
		return 0;
	int r = v->plan ? ck_plan_cast(v->plan, CK_DT_BF16, 1, err) : 0;
	for (size_t k = 0; r == 0 && k < v->n_ranks; k++)
		r = ck_plan_cast(v->rank_plans[k], CK_DT_BF16, 1, err);
	return r;
}

/* A caller waiting for one cache read. */
struct waiter {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done, err;
	unsigned char *buf; /* copy segments here (NULL: checksum them) */
	uint32_t crc;
};

static void wake(struct waiter *w, int err)
{
	pthread_mutex_lock(&w->mu);
	w->err = err;
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

static void copy_done(void *arg, int err, const struct ck_seg *segs, size_t n)
{
	struct waiter *w = arg;
	for (size_t i = 0; !err && i < n; i++) {
		if (w->buf)
			memcpy(w->buf + segs[i].dst, segs[i].p, segs[i].len);
		else
			w->crc = ck_crc32(w->crc, segs[i].p, segs[i].len);
	}
	wake(w, err);
}

/* Start one cache read (ahead: as ck_cache_read) and wait for its
 * callback. Returns 0 or -errno. */
static int read_wait(struct ck_cache *c, const struct ck_span *spans, size_t n, int ahead,
		     struct waiter *w)
{
	w->done = 0;
	w->err = 0;
	if (ck_cache_read(c, spans, n, ahead, copy_done, w) < 0)
		return -ENOMEM;
	pthread_mutex_lock(&w->mu);
	while (!w->done)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	return w->err;
}

enum { MAX_REST = 64 };

/* The spans a read takes through the cache, at most `batch` bytes held at
 * once: each piece queued, the queue read (flush) when full. ahead: the
 * reads may prefetch (ck_cache_read), not for a large read, whose next
 * large read would evaluate its bytes itself (ck_cache_eval_into). */
struct cache_queue {
	struct ck_span rest[MAX_REST];
	size_t k;
	uint64_t pending, batch;
	int ahead;
};

/* The cache spans collected so far: read them, wait, empty the list. */
static int flush(struct ck_served *s, struct cache_queue *q, unsigned char *buf, struct ck_err *err)
{
	if (!q->k)
		return 0;
	struct waiter w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .buf = buf};
	int r = read_wait(s->cache, q->rest, q->k, q->ahead, &w);
	pthread_mutex_destroy(&w.mu);
	pthread_cond_destroy(&w.cv);
	if (r < 0)
		return ck_fail_sys(err, -r, "evaluating %s", s->plan->t[q->rest[0].target].name);
	q->k = 0;
	q->pending = 0;
	return 0;
}

static int queue_span(struct ck_served *s, struct cache_queue *q, uint32_t t, uint64_t off,
		      uint64_t len, uint64_t dst, unsigned char *buf, struct ck_err *err)
{
	int rc = 0;
	for (uint64_t o = 0; o < len && rc == 0;) {
		uint64_t piece = len - o < q->batch - q->pending ? len - o : q->batch - q->pending;
		q->rest[q->k++] = (struct ck_span){t, off + o, piece, dst + o, NULL};
		q->pending += piece;
		o += piece;
		if (q->pending >= q->batch || q->k == MAX_REST)
			rc = flush(s, q, buf, err);
	}
	return rc;
}

/* An evaluated span: small and not streamable, through the cache; else
 * what the cache already holds or is evaluating from its start (a prefetch
 * ahead of this reader) is taken from there, not evaluated twice, and the
 * rest, if large or streamable, is evaluated straight into buf on this
 * thread, else through the cache too. Within a large read (q->ahead 0) a
 * small span of an in-order target counts as streamable: the large reads
 * either side evaluate that target's bytes themselves, and the cache would
 * evaluate its whole group again for the span. A large transpose's span
 * (ck_cache_batched) goes through the cache, however large, unless it is
 * the whole target: on its own it would read every source row for a few
 * columns, where the cache's jobs read the source once for many chunks. */
static int read_evaluated(struct ck_served *s, struct cache_queue *q, const struct ck_span *sp,
			  unsigned char *buf, struct ck_err *err)
{
	int streamable = ck_cache_streamable(s->cache, sp->target, !q->ahead);
	if ((sp->len < CK_STREAM_MIN && !streamable) ||
	    (ck_cache_batched(s->cache, sp->target) && sp->len < s->plan->t[sp->target].nbytes))
		return queue_span(s, q, sp->target, sp->off, sp->len, sp->dst, buf, err);
	uint64_t held = ck_cache_held(s->cache, sp->target, sp->off, sp->len);
	int rc = held ? queue_span(s, q, sp->target, sp->off, held, sp->dst, buf, err) : 0;
	uint64_t off = sp->off + held, len = sp->len - held, dst = sp->dst + held;
	if (rc < 0 || !len)
		return rc;
	if (len >= CK_STREAM_MIN || streamable)
		return ck_cache_eval_into(s->cache, sp->target, off, len, buf + dst, err);
	return queue_span(s, q, sp->target, off, len, dst, buf, err);
}

int ck_served_read(struct ck_served *s, const struct ck_span *spans, size_t n, unsigned char *buf,
		   uint64_t batch, int large, struct ck_err *err)
{
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += spans[i].len;
	struct cache_queue q = {
	    .k = 0, .pending = 0, .batch = batch, .ahead = !large && total < CK_STREAM_MIN};
	int rc = 0;
	void *bounce = NULL; /* for O_DIRECT reads (-o odirect), made on first use */
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct ck_span *sp = &spans[i];
		int fd, r, odirect = 0;
		uint64_t pos;
		if (sp->lit) {
			memcpy(buf + sp->dst, sp->lit, sp->len);
		} else if ((r = ck_cache_direct(s->cache, sp->target, sp->off, sp->len, &fd, &pos,
						&odirect)) == 1) {
			if (odirect && !bounce && posix_memalign(&bounce, CK_DIO_ALIGN, CK_DIO_PIECE))
				bounce = NULL;
			int e = !odirect	? ck_pread_full(fd, buf + sp->dst, sp->len, pos)
				: bounce ? ck_io_pread_direct(fd, buf + sp->dst, sp->len, pos, bounce,
							      CK_DIO_PIECE)
					 : -ENOMEM;
			if (e == -ENOMEM)
				rc = ck_fail_sys(err, ENOMEM, "O_DIRECT bounce buffer");
			else if (e < 0)
				rc = ck_fail_sys(err, EIO, "%s: the source file is shorter than catalogued",
						 s->plan->t[sp->target].name);
		} else if (r < 0) {
			rc = ck_fail_sys(err, -r, "%s: its source changed", s->plan->t[sp->target].name);
		} else {
			rc = read_evaluated(s, &q, sp, buf, err);
		}
	}
	if (rc == 0)
		rc = flush(s, &q, buf, err);
	free(bounce);
	return rc;
}

/* zip_crc: evaluate every tensor of pytorch_model.bin once, through the
 * cache, and fill in its CRC-32 fields. */
static int zip_crcs(struct ck_served *s, struct ck_err *err)
{
	const uint64_t step = 16u << 20;
	struct waiter w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	int rc = 0;
	for (size_t vi = 0; vi < s->n_trees && rc == 0; vi++) {
		struct ck_tree *v = &s->trees[vi];
		for (size_t k = 0; rc == 0 && k < v->zip.n_included; k++) {
			uint32_t t = ck_tree_cache_target(v, v->zip.included[k]);
			uint64_t size = s->plan->t[t].nbytes;
			w.crc = 0;
			for (uint64_t off = 0; rc == 0 && off < size; off += step) {
				struct ck_span sp = {t, off, size - off < step ? size - off : step, 0, NULL};
				int r = read_wait(s->cache, &sp, 1, 1, &w);
				if (r < 0)
					rc = ck_fail_sys(err, -r, "zip_crc: evaluating %s", s->plan->t[t].name);
			}
			if (rc == 0)
				ck_torchzip_set_crc(&v->zip, k, w.crc);
		}
	}
	pthread_mutex_destroy(&w.mu);
	pthread_cond_destroy(&w.cv);
	return rc;
}

/* A few lines, not one per tensor: an FP8 model leaves out most of its
 * tensors (DeepSeek-V3: 60,000), and plan.json lists every one. */
#define NOTE_OMITTED_MAX 3

static void note_omitted(const struct ck_tree *v, void (*log)(void *, const char *), void *ctx)
{
	size_t n = v->zip.n_omitted;
	if (log && n > NOTE_OMITTED_MAX) {
		char msg[300];
		snprintf(msg, sizeof msg,
			 "pytorch_model.bin leaves out %zu tensors with no torch 1.13 typed storage "
			 "(%s%s.ckptfs/plan.json lists them; tensors/, npy/ and model.safetensors "
			 "have them); the first %d:",
			 n, v->dir, v->dir[0] ? "/" : "", NOTE_OMITTED_MAX);
		log(ctx, msg);
		n = NOTE_OMITTED_MAX;
	}
	for (size_t k = 0; log && k < n; k++) {
		const struct ck_target *t = &v->plan->t[v->zip.omitted[k]];
		char msg[600], name[300];
		ck_escape_controls(t->name, name, sizeof name);
		snprintf(msg, sizeof msg,
			 "pytorch_model.bin leaves out %s: torch 1.13 has no typed storage for %s "
			 "(tensors/, npy/ and model.safetensors have it)",
			 name, ck_dtype_name(t->v.dtype));
		log(ctx, msg);
	}
}

/* model.gguf holds whole tensors: not on a per-rank view; dcp/ holds the
 * chunks of a --mesh rank or of --ranks, not a --shard-groups share. */
static int whole_views_only(const struct ck_serve_opts *o, const struct ck_view *v, int per_rank,
			    struct ck_err *err)
{
	if (!(v->n_ranks || per_rank || v->world))
		return 0;
	if (o->gguf.on)
		return ck_fail(err, CK_E_USAGE, "-o gguf: the GGUF view is not per rank (llama.cpp has "
						"no tensor-parallel files); mount it without --mesh, "
						"--ranks or --shard-groups");
	if (o->dcp && v->world)
		return ck_fail(err, CK_E_USAGE, "-o %s: the chunks of --mesh ranks (--rank R or "
						"--ranks LIST); a --shard-groups share is not supported",
			       o->dcp == 2 ? "torch_dist" : "dcp");
	return 0;
}

/* -o gguf: the GGUF view beside v's, both read through one cache whose
 * plan is their union; model.gguf's spans are put in its numbering. */
static int open_gguf(struct ck_served *s, const struct ck_view *v, const struct ck_serve_opts *o,
		     struct ck_err *err)
{
	if (!(s->gguf = calloc(1, sizeof *s->gguf)))
		return ck_fail_sys(err, ENOMEM, "gguf");
	if (ck_gguf_view_open(v->plan->cat, v->maps, v->n_maps, &o->gguf, s->gguf, err) < 0) {
		free(s->gguf);
		s->gguf = NULL;
		return -1;
	}
	const struct ck_plan *both[2] = {v->plan, s->gguf->plan};
	if (ck_plan_merge(both, 2, &s->with_gguf, &s->gguf_idx, err) < 0)
		return -1;
	ck_gguf_view_renumber(s->gguf, s->gguf_idx[1]);
	s->plan = s->with_gguf;
	return 0;
}

static int npy_widens(enum ck_dtype dt)
{
	return dt == CK_DT_BF16 || dt == CK_DT_F8_E4M3 || dt == CK_DT_F8_E5M2;
}

/* -o npy_f32: NumPy has no BF16 or FP8, so npy/ serves those tensors from F32
 * copies planned beside them (a planned cast, evaluated by the engine like
 * any target): the cache's plan becomes the union of its plan and every
 * tree's copies, and each tree learns its numbers in it. Trees not built
 * yet; model.gguf's spans are renumbered too. */
static int widen_npy(struct ck_served *s, struct ck_err *err)
{
	size_t n = s->n_trees, any = 0;
	const struct ck_plan **all = calloc(n + 1, sizeof *all);
	uint32_t **of = calloc(n, sizeof *of), **idx = NULL;
	int rc = -1;
	if (!all || !of || !(s->wide = calloc(n, sizeof *s->wide)) ||
	    !(s->npy_idx = calloc(n, sizeof *s->npy_idx)) ||
	    !(s->npy_wide = calloc(n, sizeof *s->npy_wide))) {
		ck_fail_sys(err, ENOMEM, "npy_f32");
		goto out;
	}
	all[0] = s->plan;
	for (size_t k = 0; k < n; k++) {
		if (ck_plan_widen(s->trees[k].plan, npy_widens, CK_DT_F32, &s->wide[k], &of[k], err) < 0)
			goto out;
		all[k + 1] = s->wide[k];
		any += s->wide[k]->n;
	}
	if (!any) { /* nothing to widen: the cache's plan stays as it is */
		rc = 0;
		goto out;
	}
	if (ck_plan_merge(all, n + 1, &s->with_npy, &idx, err) < 0)
		goto out;
	for (size_t k = 0; k < n; k++) {
		struct ck_tree *t = &s->trees[k];
		size_t nt = t->plan->n ? t->plan->n : 1;
		if (!(s->npy_idx[k] = malloc(nt * sizeof **s->npy_idx)) ||
		    !(s->npy_wide[k] = malloc(nt * sizeof **s->npy_wide))) {
			ck_fail_sys(err, ENOMEM, "npy_f32");
			goto out;
		}
		for (size_t i = 0; i < t->plan->n; i++) {
			s->npy_idx[k][i] = idx[0][ck_tree_cache_target(t, (uint32_t)i)];
			s->npy_wide[k][i] = UINT32_MAX;
		}
		for (size_t j = 0; j < s->wide[k]->n; j++)
			s->npy_wide[k][of[k][j]] = idx[k + 1][j];
		t->cache_idx = s->npy_idx[k];
		t->npy_wide = s->npy_wide[k];
	}
	if (s->gguf)
		ck_gguf_view_renumber(s->gguf, idx[0]);
	s->plan = s->with_npy;
	rc = 0;
out:
	for (size_t k = 0; of && k < n; k++)
		free(of[k]);
	free(of);
	free(all);
	ck_plan_merge_free_idx(idx, n + 1);
	return rc;
}

/* --ranks with -o dcp: one directory at the top holding every rank's
 * chunks (the trees have no dcp/ of their own), its data files in the
 * cache's numbering. */
static int top_dcp(struct ck_served *s, const struct ck_view *v, int torch_dist,
		   struct ck_err *err)
{
	if (!(s->dcp = calloc(1, sizeof *s->dcp)))
		return ck_fail_sys(err, ENOMEM, "dcp/");
	if (ck_dcp_out_build_ranks((const struct ck_plan *const *)v->rank_plans, v->ranks,
				   v->n_ranks, torch_dist, s->dcp, err) < 0) {
		free(s->dcp);
		s->dcp = NULL;
		return -1;
	}
	struct ck_dcp_out *d = s->dcp;
	for (size_t k = 0; k < d->n_data; k++)
		ck_vfile_renumber(&d->data[k], s->trees[k].cache_idx);
	if (!(s->top_files = calloc(d->n_data + 3, sizeof *s->top_files)))
		return ck_fail_sys(err, ENOMEM, "dcp/");
	s->top_dir = torch_dist ? "torch_dist" : "dcp";
	s->top_files[s->n_top_files++] = (struct ck_tree_file){".metadata", &d->metadata};
	for (size_t k = 0; k < d->n_data; k++)
		s->top_files[s->n_top_files++] = (struct ck_tree_file){d->data_name[k], &d->data[k]};
	if (torch_dist) {
		s->top_files[s->n_top_files++] =
			(struct ck_tree_file){"metadata.json", &d->megatron_json};
		s->top_files[s->n_top_files++] = (struct ck_tree_file){"common.pt", &d->common};
	}
	return 0;
}

/* Reads are never streamed with -o no_stream, nor when the CUDA backend
 * may evaluate (cuda or auto: it works through the cache): plan.json's
 * "streamed" and the cache follow this one rule. */
static int no_stream(const struct ck_serve_opts *o)
{
	return o->cache.no_stream || o->device.kind != CK_DEV_CPU;
}

struct trees_job {
	struct ck_tree *trees;
	const struct ck_tree_opts *o;
	int *rc;
	struct ck_err *err;
};

static void tree_task(void *ctx, size_t k)
{
	struct trees_job *j = ctx;
	j->rc[k] = ck_tree_build(&j->trees[k], j->o, &j->err[k]);
}

/* Each tree's files; --ranks builds its trees on the cores, one thread
 * each, and fails with the first tree's error in rank order. */
static int build_trees(struct ck_served *s, const struct ck_tree_opts *o, struct ck_err *err)
{
	if (s->n_trees == 1)
		return ck_tree_build(&s->trees[0], o, err);
	struct ck_tree_opts one = *o;
	one.threads = 1;
	struct trees_job j = {s->trees, &one, calloc(s->n_trees, sizeof *j.rc),
			      calloc(s->n_trees, sizeof *j.err)};
	int r = j.rc && j.err ? 0 : ck_fail_sys(err, ENOMEM, "serve");
	if (r == 0)
		ck_parallel_for(s->n_trees, ck_cpu_count(), tree_task, &j);
	for (size_t k = 0; r == 0 && k < s->n_trees; k++)
		if (j.rc[k] < 0) {
			*err = j.err[k];
			r = -1;
		}
	free(j.rc);
	free(j.err);
	return r;
}

int ck_served_prepare(struct ck_served *s, const struct ck_view *v, int per_rank,
		      const char *source, const struct ck_serve_opts *o, struct ck_err *err)
{
	memset(s, 0, sizeof *s);
	s->plan = v->plan;
	if (!o->gguf.on && ck_gguf_opts_used(&o->gguf))
		return ck_fail(err, CK_E_USAGE, "the -o gguf_* options go with -o gguf=TYPE");
	if (whole_views_only(o, v, per_rank, err) < 0 || (o->gguf.on && open_gguf(s, v, o, err) < 0))
		return -1;
	size_t n = v->n_ranks ? v->n_ranks : 1;
	if (!(s->trees = calloc(n, sizeof *s->trees)))
		return ck_fail_sys(err, ENOMEM, "serve");
	struct ck_tree_opts to = {.source = source,
				  .max_shard_size = o->max_shard_size,
				  .part_size = o->part_size,
				  .zip_crc = o->zip_crc,
				  .no_direct = o->cache.no_direct,
				  .no_stream = no_stream(o),
				  .extra_names = s->gguf ? ck_gguf_view_names(s->gguf) : NULL,
				  .extras = s->gguf ? ck_gguf_view_files(s->gguf) : NULL,
				  .n_extras = s->gguf ? ck_gguf_view_n_files(s->gguf) : 0,
				  .dcp = v->n_ranks ? 0 : o->dcp};
	if (!o->dcp && o->dcp_lazy && !v->n_ranks && !v->world)
		to.dcp = to.dcp_lazy = 1;
	for (size_t k = 0; k < n; k++, s->n_trees++) {
		struct ck_tree *t = &s->trees[k];
		if (v->n_ranks) { /* one daemon, rankR/ per rank, one cache for all */
			t->plan = v->rank_plans[k];
			t->cache_idx = v->rank_idx[k];
			t->rank = v->ranks[k];
			snprintf(t->dir, sizeof t->dir, "rank%lld", (long long)v->ranks[k]);
		} else {
			t->plan = v->plan;
			t->cache_idx = s->gguf ? s->gguf_idx[0] : NULL;
			t->rank = per_rank ? v->rank : -1;
		}
	}
	if ((o->npy_f32 && widen_npy(s, err) < 0) || build_trees(s, &to, err) < 0)
		return -1;
	if (v->n_ranks && o->dcp && top_dcp(s, v, o->dcp == 2, err) < 0)
		return -1;
	return 0;
}

/* The first view that leaves tensors out says which; the others (the ranks
 * of --ranks: an FP8 model's 64 ranks printed 256 lines) share one line. */
static void note_omitted_all(const struct ck_served *s, void (*log)(void *, const char *),
			     void *ctx)
{
	size_t first = SIZE_MAX, next = 0, last = 0, more = 0, lo = SIZE_MAX, hi = 0;
	for (size_t k = 0; k < s->n_trees; k++) {
		size_t n = s->trees[k].zip.n_omitted;
		if (!n)
			continue;
		if (first == SIZE_MAX) {
			first = k;
			continue;
		}
		next = more++ ? next : k;
		last = k;
		lo = n < lo ? n : lo;
		hi = n > hi ? n : hi;
	}
	if (first == SIZE_MAX || !log)
		return;
	note_omitted(&s->trees[first], log, ctx);
	if (!more)
		return;
	char msg[500], count[48], where[200];
	if (lo == hi)
		snprintf(count, sizeof count, "%zu", lo);
	else
		snprintf(count, sizeof count, "%zu to %zu", lo, hi);
	if (more == 1)
		snprintf(where, sizeof where, "in %s/ too (its", s->trees[next].dir);
	else
		snprintf(where, sizeof where,
			 "in each of %zu more views too (%s/ to %s/; each one's", more,
			 s->trees[next].dir, s->trees[last].dir);
	snprintf(msg, sizeof msg,
		 "pytorch_model.bin leaves out %s tensors %s .ckptfs/plan.json lists them)", count,
		 where);
	log(ctx, msg);
}

int ck_served_start(struct ck_served *s, const struct ck_serve_opts *o,
		    void (*log)(void *, const char *), void *log_ctx, struct ck_err *err)
{
	note_omitted_all(s, log, log_ctx);
	struct ck_cache_opts co = o->cache;
	co.log = log;
	co.log_ctx = log_ctx;
	char note[400];
	if (ck_device_open(&o->device, co.threads > 0 ? co.threads : 1, &s->gpu, note, sizeof note,
			   err) < 0)
		return -1;
	if (note[0] && log)
		log(log_ctx, note);
	co.gpu = s->gpu;
	co.gpu_min = o->device.gpu_min;
	co.no_stream = no_stream(o); /* as plan.json says */
	if (ck_cache_new(s->plan, &co, &s->cache, err) < 0 || (o->zip_crc && zip_crcs(s, err) < 0))
		return -1;
	return 0;
}

void ck_served_stop(struct ck_served *s)
{
	ck_cache_free(s->cache);
	s->cache = NULL;
	ck_gpu_close(s->gpu); /* after the evaluators that hold its lanes */
	s->gpu = NULL;
}

void ck_served_close(struct ck_served *s)
{
	ck_served_stop(s);
	for (size_t k = 0; k < s->n_trees; k++)
		ck_tree_free(&s->trees[k]);
	free(s->trees);
	if (s->gguf)
		ck_gguf_view_free(s->gguf);
	free(s->gguf);
	ck_plan_free(s->with_gguf);
	ck_plan_merge_free_idx(s->gguf_idx, 2);
	for (size_t k = 0; s->wide && k < s->n_trees; k++)
		ck_plan_free(s->wide[k]);
	free(s->wide);
	ck_plan_free(s->with_npy);
	ck_plan_merge_free_idx(s->npy_idx, s->n_trees);
	ck_plan_merge_free_idx(s->npy_wide, s->n_trees);
	if (s->dcp)
		ck_dcp_out_free(s->dcp);
	free(s->dcp);
	free(s->top_files);
	memset(s, 0, sizeof *s);
}
