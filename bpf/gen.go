package bpf

// The include paths let clang find <asm/types.h> from Debian's multiarch
// layout on amd64 and arm64 hosts; the output is the same on both.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -target bpfel -type rec_hdr -type counters -type port_bitmap -type skip_key -type skip_range -type kc_stats -type kc_cmd -type kc_name -type kc_flow -type kc_slot -type kc_state -type kc_rflow hotsniff hotsniff.c
