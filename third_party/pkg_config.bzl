"""pkg_config_library: wraps system libraries found through pkg-config as a cc_library.

Runs `pkg-config --cflags/--libs` when the repository is set up, so the exact -l
lists (gRPC pulls in ~90 flags, all of Abseil among them) and -D defines come from
the installed Debian packages. Headers under /usr/include need no declaration.
"""

def _pkg_config_library_impl(rctx):
    pc = rctx.which("pkg-config")
    if pc == None:
        fail("pkg-config not found on PATH (apt-get install pkg-config)")
    defines = []
    copts = []
    linkopts = []
    for m in rctx.attr.modules:
        r = rctx.execute([pc, "--cflags", m])
        if r.return_code != 0:
            fail("pkg-config --cflags %s failed (is its -dev package installed? run ./setup.sh): %s" % (m, r.stderr))
        for f in r.stdout.strip().split(" "):
            if f.startswith("-D"):
                if f[2:] not in defines:
                    defines.append(f[2:])
            elif f and f not in copts:
                copts.append(f)
        r = rctx.execute([pc, "--libs", m])
        if r.return_code != 0:
            fail("pkg-config --libs %s failed: %s" % (m, r.stderr))
        linkopts += [f for f in r.stdout.strip().split(" ") if f]
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", """\
cc_library(
    name = "lib",
    defines = {defines},
    copts = {copts},
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(defines = repr(defines), copts = repr(copts), linkopts = repr(linkopts)))

pkg_config_library = repository_rule(
    implementation = _pkg_config_library_impl,
    attrs = {"modules": attr.string_list(mandatory = True)},
    environ = ["PKG_CONFIG_PATH"],
    local = True,
)
