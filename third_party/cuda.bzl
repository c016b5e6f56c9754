"""cuda_library: a cc_library compiled from one .cu file by nvcc, or from stubs.

nvcc runs from a genrule (no rules_cuda offline); its flags are fixed here
(they ignore -c opt/dbg): sm_75 for older cards, sm_90 + PTX for H100/H200 and
newer. Where @local_cuda is a stub (no toolkit, see cuda_configure.bzl) the
library is built from `stub_srcs` instead, so every target builds without CUDA.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "NVCC")

_GENCODE = (" -gencode arch=compute_75,code=sm_75" +
            " -gencode arch=compute_90,code=sm_90" +
            " -gencode arch=compute_90,code=compute_90")

def cuda_library(name, cu_src, hdrs, cu_hdrs = [], stub_srcs = [], deps = [], **kwargs):
    """cc_library `name` from `cu_src` (nvcc, links cudart + cuBLAS) or `stub_srcs`.

    Args:
      name: the cc_library.
      cu_src: the .cu file.
      hdrs: the library's public headers (plain C++, no CUDA includes).
      cu_hdrs: other headers the .cu file includes.
      stub_srcs: C++ sources used instead of cu_src where CUDA is unavailable.
      deps: cc_library deps of both variants.
      **kwargs: passed to the cc_library (visibility, testonly...).
    """
    if not CUDA_AVAILABLE:
        native.cc_library(name = name, srcs = stub_srcs, hdrs = hdrs, deps = deps, **kwargs)
        return
    obj = name + "_cu.o"
    native.genrule(
        name = name + "_cu",
        srcs = [cu_src] + hdrs + cu_hdrs,
        outs = ["lib" + name + "_cu.a"],
        cmd = NVCC + " -std=c++17 -O3 -I. -Xcompiler -fPIC" + _GENCODE +
              " -c $(location " + cu_src + ") -o $(@D)/" + obj +
              " && ar rcs $@ $(@D)/" + obj,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = ["lib" + name + "_cu.a"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cublas", "@local_cuda//:cudart"],
        **kwargs
    )
