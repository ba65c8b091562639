#include "corpus_file.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace skippy::jinja::testing {

bool parse_corpus(std::string_view text, std::vector<corpus_entry> & out, std::string & error) {
    std::istringstream in{std::string(text)};
    std::string line;
    corpus_entry cur;
    bool open = false, json_template = false;
    std::vector<std::string> lines;
    while (std::getline(in, line)) {
        if (line.rfind("### ", 0) == 0) {
            if (open) { error = "case " + cur.name + " has no '---' line"; return false; }
            cur = corpus_entry{};
            std::istringstream words(line.substr(4));
            words >> cur.name;
            json_template = false;
            for (std::string flag; words >> flag;) {
                if (flag == "json") json_template = true;
                else if (flag == "notrim") cur.trim = false;
                else { error = "unknown flag " + flag + " in case " + cur.name; return false; }
            }
            lines.clear();
            open = true;
        } else if (open && line.rfind("---", 0) == 0) {
            if (json_template) {
                if (lines.size() != 1) { error = "case " + cur.name + ": json wants one line"; return false; }
                auto j = nlohmann::json::parse(lines[0], nullptr, false);
                if (!j.is_string()) { error = "case " + cur.name + ": not a JSON string"; return false; }
                cur.source = j.get<std::string>();
            } else {
                for (size_t i = 0; i < lines.size(); ++i) cur.source += (i ? "\n" : "") + lines[i];
            }
            std::string ctx = line.substr(3);
            cur.context_json = ctx.find_first_not_of(" \t") == std::string::npos ? "" : ctx;
            out.push_back(std::move(cur));
            open = false;
        } else if (open) {
            lines.push_back(line);
        }
    }
    if (open) { error = "the last case has no '---' line"; return false; }
    return true;
}

}  // namespace skippy::jinja::testing
