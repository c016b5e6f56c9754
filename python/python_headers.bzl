"""python_headers: the C headers of Debian's Python 3 (python3-dev) and pybind11 (pybind11-dev).

pkg_config_library (third_party/pkg_config.bzl) turns a module's cflags into the
library's own copts, which Bazel does not pass on to dependents; an extension
needs Python.h's directory on its include path. So this rule runs
`pkg-config --cflags` for each module, links every -I directory into the
repository and declares it with `includes`, which dependents do get.
"""

def _python_headers_impl(rctx):
    pc = rctx.which("pkg-config")
    if pc == None:
        fail("pkg-config not found on PATH (apt-get install pkg-config)")
    includes = []
    for m in rctx.attr.modules:
        r = rctx.execute([pc, "--cflags", m])
        if r.return_code != 0:
            fail("pkg-config --cflags %s failed (is its -dev package installed? run ./setup.sh): %s" % (m, r.stderr))
        for f in r.stdout.strip().split(" "):
            if f.startswith("-I"):
                link = "include_%d" % len(includes)
                rctx.symlink(f[2:], link)
                includes.append(link)
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """\
cc_library(
    name = "lib",
    hdrs = glob(["include_*/**/*.h"]),
    includes = {includes},
    visibility = ["//visibility:public"],
)
""".format(includes = repr(includes)))

python_headers = repository_rule(
    implementation = _python_headers_impl,
    attrs = {"modules": attr.string_list(mandatory = True)},
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
