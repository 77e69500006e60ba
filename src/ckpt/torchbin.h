/* torch.save checkpoints (pytorch_model.bin) as sources: the zip's directory,
 * data.pkl through the restricted pickle reader, and every tensor as a
 * (possibly strided) view into its stored `data/<key>` record, so tensor
 * bytes are read in place like safetensors data. The pickle's dict may nest
 * (a {"model": state_dict} checkpoint): keys are joined with ".". Values
 * that are not tensors (ints, strings, optimizer hyper-parameters) are
 * counted and left out. Storages are the typed ones of torch 1.x/2.x
 * (torch.FloatStorage, ...). */
#ifndef CK_TORCHBIN_H
#define CK_TORCHBIN_H

#include <stdint.h>

#include "leftout.h"
#include "../util/error.h"
#include "tensors.h"

/* Fills out->tensors (names owned), header_len 0; the non-tensor values
 * left out are added to *lo (may be NULL) with what they are. */
int ck_torchbin_read_fd(int fd, uint64_t size, const char *what, struct ck_file_tensors *out,
			struct ck_leftout *lo, struct ck_err *err);
/* The archive in bytes [base, base+size) of the file; a pickle that holds a
 * single tensor (DCP chunks) gives one tensor named single_name. */
int ck_torchbin_read_at(int fd, uint64_t base, uint64_t size, const char *what,
			const char *single_name, struct ck_file_tensors *out, struct ck_leftout *lo,
			struct ck_err *err);
/* The typed storage class of a dtype ("FloatStorage"), or NULL for dtypes
 * torch 1.13 has none for (FP8, unsigned wider than 8 bits): one table for
 * reading torch.save files and writing the virtual pytorch_model.bin. */
const char *ck_torch_storage(enum ck_dtype dt);

/* The legacy format (torch < 1.6, or _use_new_zipfile_serialization=False):
 * pickles back to back, then each storage's bytes; read the same way, with
 * each storage a run of the file. */
int ck_torchbin_read_legacy(int fd, uint64_t size, const char *what, struct ck_file_tensors *out,
			    struct ck_leftout *lo, struct ck_err *err);
/* Whether the first n bytes start a legacy torch.save stream. */
int ck_is_torch_legacy(const unsigned char *p, size_t n);

/* Whether the first bytes are a zip's (PK\3\4). */
int ck_is_zip(const unsigned char *first4);

#endif
