#!/usr/bin/env bash
# ckptfs(1), made from the binary's own help texts (`ckptfs help` and
# `ckptfs mount --help`), so the man page and --help cannot disagree:
#   bash tools/manpage.sh BUILD/src/ckptfs VERSION > ckptfs.1
set -euo pipefail
bin=$1
version=$2
esc() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\\&'/"; }
cat <<HEAD
.TH CKPTFS 1 "" "ckptfs $version" "User Commands"
.SH NAME
ckptfs \\- mount a machine-learning checkpoint through a mapping file, inspect, convert and compare checkpoints
.SH SYNOPSIS
.nf
HEAD
"$bin" help | esc
cat <<MID
.fi
.SH DESCRIPTION
ckptfs reads a checkpoint (safetensors, torch.save zip or legacy, DCP, Megatron torch_dist, GGUF)
together with mapping files and presents the transformed model state as files, computed lazily on
read. The mapping language is described in
.BR ckptfs-mapping (5)
and the shipped mappings are listed by
.BR "ckptfs mappings" .
C and C++ programs read the same views in-process through libckptfs
.RI ( ckptfs.h ,
.BR "pkg-config ckptfs" ).
.SH MOUNT OPTIONS
.nf
MID
"$bin" mount --help | esc
cat <<TAIL
.fi
.SH MOUNT(8)
Installed as
.B mount.fuse.ckptfs
and
.BR mount.ckptfs ,
ckptfs mounts with
.B "mount -t fuse.ckptfs SOURCE DIR -o mapping=NAME,mesh=tp=8,rank=R"
and from /etc/fstab lines of type
.BR fuse.ckptfs .
.SH SEE ALSO
.BR ckptfs-mapping (5),
.BR mount (8),
.BR fusermount3 (1)
TAIL
