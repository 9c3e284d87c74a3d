package main

import "github.com/hotsniff/hotsniff/bpf"

func cgroupRoot() (string, bool) { return bpf.CgroupMounted() }
