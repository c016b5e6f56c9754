"""cuda_configure: the CUDA toolkit on this machine as @local_cuda.

Looks in $CUDA_HOME, then /usr/local/cuda. The toolkit's tree is symlinked into
the repository so that its headers are inside the execution root (Bazel rejects
absolute include paths outside it). Fails with a clear message when no toolkit
is installed: pscluster's CUDA backend must compile and link everywhere.
"""

def _cuda_configure_impl(rctx):
    candidates = []
    home = rctx.os.environ.get("CUDA_HOME", "")
    if home:
        candidates.append(home)
    candidates.append("/usr/local/cuda")
    root = None
    for c in candidates:
        if rctx.path(c + "/bin/nvcc").exists and rctx.path(c + "/include/cuda_runtime.h").exists:
            root = c
            break
    if root == None:
        fail("CUDA toolkit not found (looked in %s): install it so that nvcc, cudart and cuBLAS exist, or set CUDA_HOME" % candidates)
    for d in ["bin", "include", "lib64"]:
        rctx.symlink(root + "/" + d, d)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("defs.bzl", 'CUDA_ROOT = "%s"\nNVCC = "%s/bin/nvcc"\n' % (root, root))
    rctx.template("BUILD.bazel", rctx.attr.build_tpl, {"%{cuda_root}": root})

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    attrs = {"build_tpl": attr.label(default = "//third_party:cuda.BUILD.tpl")},
    environ = ["CUDA_HOME"],
    local = True,
)
