"""pscluster_fuzz_test: a libFuzzer target that is also a regression test.

Normal build: a cc_test linking fuzz/standalone_main.cc, which replays the seed
corpus (fuzz/corpus/<corpus>/) through LLVMFuzzerTestOneInput once.
`--config=fuzz` (.bazelrc: clang, --define=fuzz=1, ASan + UBSan): the same
cc_test links libFuzzer's main instead (-fsanitize=fuzzer), still given the seed
files (not the directory, so libFuzzer runs each once and writes nothing);
fuzz/fuzz_smoke.sh runs the binaries for a bounded time to fuzz.
"""

def pscluster_fuzz_test(name, srcs, deps, corpus, size = "small", **kwargs):
    native.filegroup(
        name = name + "_corpus",
        srcs = native.glob(["corpus/%s/*" % corpus]),
    )
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        args = ["$(locations :%s_corpus)" % name],
        data = [":%s_corpus" % name],
        linkopts = select({
            "//fuzz:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            "//fuzz:fuzzing": [],
            "//conditions:default": ["//fuzz:standalone_main"],
        }),
        tags = ["fuzz"],
        **kwargs
    )
