// Writes the jinja fuzzer's seed corpus: every template of tests/jinja/corpus.txt (with
// its context after a NUL byte), the tests' own tool templates and, when the shared test
// data is there, the chat templates of its vocabularies. Usage: jinja_fuzz_seeds DIR
#include "corpus_file.h"
#include "gguf/gguf.h"
#include "seed_files.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

bool read_file(const std::string & path, std::string & out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    const char * dir_arg = skippy::fuzz_seeds::corpus_dir_arg(argc, argv);
    if (!dir_arg) return 2;
    const std::string dir = dir_arg;
    const std::string tests = SKIPPY_JINJA_TEST_DIR;
    std::string text, error;
    std::vector<skippy::jinja::testing::corpus_entry> entries;
    if (!read_file(tests + "/corpus.txt", text) || !skippy::jinja::testing::parse_corpus(text, entries, error)) {
        std::fprintf(stderr, "jinja_fuzz_seeds: cannot read %s/corpus.txt %s\n", tests.c_str(), error.c_str());
        return 1;
    }
    bool ok = true;
    int n = 0;
    for (const auto & e : entries) {
        std::string bytes = e.source;
        if (!e.context_json.empty()) bytes += std::string(1, '\0') + e.context_json;
        ok &= skippy::fuzz_seeds::write_seed_file(dir + "/corpus_" + e.name, bytes);
        ++n;
    }
    for (const char * name : {"llama31_tools", "llama32_tools_system"}) {
        std::string source;
        if (read_file(tests + "/templates/" + name + ".jinja", source)) {
            ok &= skippy::fuzz_seeds::write_seed_file(dir + "/template_" + name, source);
            ++n;
        }
    }
    const char * data = std::getenv("SKIPPY_TEST_DATA");
    std::string root = data && *data ? data : std::string(SKIPPY_DEFAULT_TEST_DATA);
    for (const char * vocab : {"qwen3", "gptoss", "llama3"}) {
        auto file = skippy::gguf::file::open(root + "/vocab/ggml-vocab-" + vocab + ".gguf");
        if (!file.is_ok()) continue;
        if (auto source = (*file)->get_string("tokenizer.chat_template")) {
            ok &= skippy::fuzz_seeds::write_seed_file(dir + "/model_" + vocab, *source);
            ++n;
        }
    }
    std::fprintf(stderr, "jinja_fuzz_seeds: wrote %d seeds to %s\n", n, dir.c_str());
    return ok ? 0 : 1;
}
