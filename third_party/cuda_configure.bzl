"""cuda_configure: the CUDA toolkit on this machine as @local_cuda, or a stub.

Looks in $CUDA_HOME, then /usr/local/cuda, for bin/nvcc and
include/cuda_runtime.h. When found, the toolkit's tree is symlinked into the
repository so that its headers are inside the execution root (Bazel rejects
absolute include paths outside it), and @local_cuda//:defs.bzl says
CUDA_AVAILABLE = True.

When no toolkit is found, or PSCLUSTER_NO_CUDA=1 is set (to build CPU only on a
machine that has one), @local_cuda is a stub: the same targets (:cuda_headers,
:cudart, :cublas) with nothing in them, CUDA_AVAILABLE = False and NVCC = "".
Every target still builds; third_party/cuda.bzl's cuda_library then compiles
its stub sources instead of its .cu file, so libpscluster_cuda.so reports
"built without CUDA" when a job asks for a GPU.
"""

def _cuda_configure_impl(rctx):
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    candidates = []
    home = rctx.os.environ.get("CUDA_HOME", "")
    if home:
        candidates.append(home)
    candidates.append("/usr/local/cuda")
    disabled = rctx.os.environ.get("PSCLUSTER_NO_CUDA", "") not in ["", "0"]
    root = None
    if not disabled:
        for c in candidates:
            if rctx.path(c + "/bin/nvcc").exists and rctx.path(c + "/include/cuda_runtime.h").exists:
                root = c
                break
    if root == None:
        why = "PSCLUSTER_NO_CUDA is set" if disabled else "no CUDA toolkit in %s" % candidates
        # buildifier: disable=print
        print("pscluster: building CPU only (%s): libpscluster_cuda.so will report " % why +
              "'built without CUDA'; install the CUDA toolkit or set CUDA_HOME for the CUDA backend.")
        rctx.file("defs.bzl", "CUDA_AVAILABLE = False\nCUDA_ROOT = \"\"\nNVCC = \"\"\n" +
                              "CUDA_MISSING_REASON = \"%s\"\n" % why)
        rctx.template("BUILD.bazel", rctx.attr.stub_build_tpl, {"%{reason}": why})
        return
    for d in ["bin", "include", "lib64"]:
        rctx.symlink(root + "/" + d, d)
    rctx.file("defs.bzl", 'CUDA_AVAILABLE = True\nCUDA_ROOT = "%s"\nNVCC = "%s/bin/nvcc"\nCUDA_MISSING_REASON = ""\n' % (root, root))
    rctx.template("BUILD.bazel", rctx.attr.build_tpl, {"%{cuda_root}": root})

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    attrs = {
        "build_tpl": attr.label(default = "//third_party:cuda.BUILD.tpl"),
        "stub_build_tpl": attr.label(default = "//third_party:cuda_stub.BUILD.tpl"),
    },
    environ = ["CUDA_HOME", "PSCLUSTER_NO_CUDA"],
    local = True,
)
