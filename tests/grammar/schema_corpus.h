// JSON schemas with documents that match them (in the converter's shape: properties
// in schema order, whitespace within the policy) and documents that do not. The corpus
// lives in schema_corpus.json, beside this header, so that the C++ grammar tests, the
// grammar fuzzer's seeds and the Node client tests (tests/http/node) read one list.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef SKIPPY_SCHEMA_CORPUS_FILE
#error "SKIPPY_SCHEMA_CORPUS_FILE must name tests/grammar/schema_corpus.json (CMake target skippy_schema_corpus)"
#endif

namespace skippy::grammar::testing {

struct schema_case {
    std::string              name;
    std::string              schema;  // JSON text, properties in the file's order
    std::vector<std::string> valid;
    std::vector<std::string> invalid;
};

// Loaded once. A missing or malformed file is the test tree's own bug: it aborts with
// the reason rather than giving every test an empty corpus to pass on.
inline const std::vector<schema_case> & schema_corpus() {
    static const std::vector<schema_case> corpus = [] {
        using ojson = nlohmann::ordered_json;
        std::ifstream in(SKIPPY_SCHEMA_CORPUS_FILE, std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        const ojson all = ojson::parse(text.str(), nullptr, false);
        if (!in || !all.is_array() || all.empty()) {
            std::fprintf(stderr, "schema corpus: cannot read a JSON array from %s\n", SKIPPY_SCHEMA_CORPUS_FILE);
            std::abort();
        }
        std::vector<schema_case> out;
        for (const ojson & e : all) {
            schema_case c;
            c.name = e.at("name").get<std::string>();
            c.schema = e.at("schema").dump();
            for (const ojson & d : e.at("valid")) c.valid.push_back(d.get<std::string>());
            for (const ojson & d : e.at("invalid")) c.invalid.push_back(d.get<std::string>());
            out.push_back(std::move(c));
        }
        return out;
    }();
    return corpus;
}

}  // namespace skippy::grammar::testing
