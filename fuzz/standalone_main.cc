// A main() for libFuzzer targets built without libFuzzer (the normal gcc
// build): replays every file named on the command line (a directory: every
// regular file in it, sorted) through LLVMFuzzerTestOneInput once, so a fuzz
// target's seed corpus runs as a regression test wherever the project builds.
// Arguments starting with '-' (libFuzzer flags) are ignored. Exits 1 when no
// input was found or one could not be read; a failing check inside the target
// aborts the process, which fails the test.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::string> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg, ec)) {
        if (entry.is_regular_file(ec)) files.push_back(entry.path().string());
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else {
      inputs.push_back(arg);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "%s: no inputs (usage: %s FILE_OR_DIR...)\n", argv[0], argv[0]);
    return 1;
  }
  std::vector<uint8_t> data;
  for (const std::string& path : inputs) {
    if (!ReadFile(path, &data)) {
      std::fprintf(stderr, "cannot read input '%s'\n", path.c_str());
      return 1;
    }
    std::fprintf(stderr, "Running: %s (%zu bytes)\n", path.c_str(), data.size());
    // An empty vector's data() may be null; libFuzzer never passes null.
    static const uint8_t kEmpty = 0;
    LLVMFuzzerTestOneInput(data.empty() ? &kEmpty : data.data(), data.size());
  }
  std::fprintf(stderr, "Done %zu inputs\n", inputs.size());
  return 0;
}
