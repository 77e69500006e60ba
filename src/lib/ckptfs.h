/* libckptfs: a checkpoint transformed by mapping files, read in-process.
 *
 * The same engine as the `ckptfs` filesystem, without FUSE: open a source
 * (a safetensors file or directory, torch.save, DCP, GGUF) with mapping
 * files and an optional tensor-parallel rank, list the target tensors
 * (name, dtype, shape, bytes, dependency group) without reading tensor
 * data, and read any byte range of a target, or of a served flat file
 * (model.safetensors, pytorch_model.bin, ...), into your buffer. The first
 * read of a target evaluates only what it needs (io_uring reads, the
 * evaluator pool, a bounded cache); renamed tensors are read straight from
 * their source file, and a read of 1 MiB or more of an evaluated tensor is
 * evaluated straight into the caller's buffer on the caller's thread (no
 * cache entry, no copy: read large ranges from several threads to use
 * several cores).
 *
 *     ckptfs *h;
 *     struct ckptfs_error e;
 *     const char *opts[] = {"mapping=hf-llama-to-megatron", "mesh=tp=8", "rank=3", NULL};
 *     if (ckptfs_open(&h, "/models/llama", opts, &e) != 0)
 *         fprintf(stderr, "%s\n", e.message);
 *     for (size_t i = 0; i < ckptfs_count(h); i++)
 *         ckptfs_read(h, i, 0, buf, ckptfs_tensor_bytes(h, i), &e);
 *     ckptfs_close(h);
 *
 * Errors: a function that can fail returns a negative value (or NULL) and,
 * if err is not NULL, fills it with a code (enum ckptfs_code, the same
 * numbers as the `ckptfs` command's exit statuses) and one line naming the
 * file, key, mapping rule or option and what is wrong.
 *
 * Threads: every function may be called from any thread, and reads run
 * concurrently, except ckptfs_close, which must not overlap any other call
 * on its handle. Strings and arrays returned stay valid until
 * ckptfs_close.
 *
 * ABI: the soname carries CKPTFS_ABI_VERSION; handles are opaque, metadata
 * comes through accessors, and the one caller-allocated struct that may
 * grow (ckptfs_stats) is passed with its size. Build with
 * `pkg-config --cflags --libs ckptfs` (static: `--static`; internal symbols
 * of the static archive start with ck_ and are not part of the API). */
#ifndef CKPTFS_H
#define CKPTFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPTFS_ABI_VERSION 1

typedef struct ckptfs ckptfs;

enum ckptfs_code {
	CKPTFS_OK = 0,
	CKPTFS_E_SYSTEM = 1,  /* I/O or memory; sys_errno says which */
	CKPTFS_E_USAGE = 2,   /* a bad option, index or name from the caller */
	CKPTFS_E_SOURCE = 3,  /* a malformed or inconsistent checkpoint */
	CKPTFS_E_MAPPING = 4, /* a malformed mapping, or a plan that cannot be built */
};

struct ckptfs_error {
	int code;      /* enum ckptfs_code */
	int sys_errno; /* for CKPTFS_E_SYSTEM, else 0 */
	char message[1024];
};

/* The library's version, "MAJOR.MINOR.PATCH". */
const char *ckptfs_version(void);

/* Open source through the options, a NULL-terminated list of "key" or
 * "key=value" strings (NULL: none):
 *   mapping=FILE|NAME   a mapping file, or a shipped one by name (repeatable;
 *                       applied in order, as `ckptfs --mapping`)
 *   mesh=AXES rank=R    a per-rank view (mesh=tp=8, or mesh=dp=2,tp=4 passed
 *                       as one string); without rank=, the launcher's RANK
 *   shard_groups world_size=N rank=R   whole dependency groups for process R
 *   state=params|optimizer|all   the parameters or the optimizer state only
 *   set=NAME=VALUE               a config.json value as the mappings see it
 *                                (an integer or true/false; repeatable)
 *   cache_size=SIZE chunk=SIZE group_max=SIZE threads=N no_uring odirect
 *   no_direct no_prefetch no_stream read_once max_shard_size=SIZE part_size=SIZE
 *   zip_crc npy_f32 gguf_dequant=F32|BF16 device=cpu|cuda|cuda:N|auto
 *   gpu_mem=SIZE gpu_min=SIZE
 *   gguf[=TYPE] gguf_pre=NAME gguf_vocab=none gguf_imatrix=FILE gguf_pure
 *   gguf_output_type=TYPE gguf_embd_type=TYPE gguf_leave_output
 *   gguf_tensor_type=PATTERN=TYPE gguf_tensor_type_file=FILE
 *   gguf_override_kv=KEY=TYPE:VALUE
 *   gguf_split_max_size=SIZE gguf_split_max_tensors=N dcp torch_dist
 *   eval_delay_ms=N
 *                       as `ckptfs mount -o` (its "serving options", see
 *                       ckptfs(1))
 * Everything that can fail on the input fails here. Returns 0 and *out, or
 * -1 with err (and *out NULL). */
int ckptfs_open(ckptfs **out, const char *source, const char *const *options,
		struct ckptfs_error *err);
/* Stop the evaluators (reads in flight finish first) and free. NULL: no-op. */
void ckptfs_close(ckptfs *h);

/* Target tensors, in the order of the served files (natural key order). */
size_t ckptfs_count(const ckptfs *h);
/* The index of the target named name, or -1. */
long ckptfs_find(const ckptfs *h, const char *name);
/* Metadata of target i (NULL / 0 / -1 if i is out of range). dtype is a
 * safetensors dtype name: "F32", "BF16", "F8_E4M3", "I64", ... The shape
 * has ckptfs_tensor_ndim entries (0: a scalar). group: the dependency group
 * evaluated together with it. */
const char *ckptfs_tensor_name(const ckptfs *h, size_t i);
const char *ckptfs_tensor_dtype(const ckptfs *h, size_t i);
int ckptfs_tensor_ndim(const ckptfs *h, size_t i);
const int64_t *ckptfs_tensor_shape(const ckptfs *h, size_t i);
uint64_t ckptfs_tensor_bytes(const ckptfs *h, size_t i);
long ckptfs_tensor_group(const ckptfs *h, size_t i);

/* Read bytes [off, off+len) of target i (C order, little endian) into buf.
 * Returns the bytes read: len, less at the end of the tensor, 0 past it;
 * or -1 with err. A read of 1 MiB or more is evaluated on the caller's
 * thread, as is a smaller one starting where the last large read of the
 * same target (file) ended: a sequential reader's last piece. Other small
 * reads go through the shared cache, which evaluates a tensor's group once
 * for many of them and prefetches what comes next; so do the pieces of a
 * transposed tensor too big for one evaluation window (an EasyDeL lm_head
 * kernel), which a read of its own would take every source row for. */
int64_t ckptfs_read(ckptfs *h, size_t i, uint64_t off, void *buf, size_t len,
		    struct ckptfs_error *err);

/* The files a mount of the same view shows: at its root model.safetensors,
 * pytorch_model.bin, config.json (the source's), and with max_shard_size
 * the shards and their index, on a per-rank view vLLM's
 * model-rank-R-part-P.safetensors; with gguf, model.gguf; with dcp,
 * "dcp/.metadata" and "dcp/__0_0.distcp" (torch_dist: "torch_dist/...");
 * then "npy/NAME.npy" for each target in ckptfs_tensor_name's order (NAME
 * escaped as the mount escapes it), each a NumPy 1.0 file laid out when
 * asked for. */
size_t ckptfs_file_count(const ckptfs *h);
long ckptfs_file_find(const ckptfs *h, const char *name);
const char *ckptfs_file_name(const ckptfs *h, size_t k);
uint64_t ckptfs_file_size(const ckptfs *h, size_t k);
/* As ckptfs_read, for file k. */
int64_t ckptfs_file_read(ckptfs *h, size_t k, uint64_t off, void *buf, size_t len,
			 struct ckptfs_error *err);

/* The plan as JSON: targets with their groups and flat offsets, the groups'
 * source ranges, the files (the same document as a mount's
 * .ckptfs/plan.json), built on the first call; NULL when out of memory.
 * *len gets its length. */
const char *ckptfs_plan_json(const ckptfs *h, size_t *len);

struct ckptfs_stats {
	uint64_t source_bytes_read; /* bytes requested from source files */
	uint64_t read_requests;
	uint64_t groups_evaluated, regions_evaluated;
	uint64_t cache_hits, cache_misses, cache_bytes, cache_evictions;
	uint64_t direct_reads; /* reads answered from the source file itself */
	uint64_t gpu_reads, gpu_bytes;
	/* reads evaluated straight into the caller's buffer: of 1 MiB or more, or
	 * of a target whose reads are streamed (a cast, fused blocks; no_stream
	 * turns those off) */
	uint64_t streamed_reads;
	/* chunks read whole and dropped before the budget forced it (read_once),
	 * and chunks whose memory was reused rather than newly allocated */
	uint64_t cache_dropped, cache_recycled;
};
/* Counters since open. size: sizeof(struct ckptfs_stats) as the caller
 * knows it (later versions only add fields at the end). */
void ckptfs_get_stats(ckptfs *h, struct ckptfs_stats *s, size_t size);

#ifdef __cplusplus
}
#endif

#endif
