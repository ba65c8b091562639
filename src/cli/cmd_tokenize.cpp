// skippy tokenize: token ids of a text.
#include "cli/commands.h"
#include "cli/common.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace skippy::cli {
namespace {

struct tokenize_options {
    std::string model_path;
    std::string prompt;
    bool        ids = false;
    bool        no_bos = false;
    bool        parse_special = false;
};

int run_tokenize(const tokenize_options & o) {
    auto file = load_gguf(o.model_path);
    if (!file.is_ok()) return fail(file.error());
    auto tok = tokenizer::from_gguf(**file);
    if (!tok.is_ok()) return fail(tok.error());
    const bool add_bos = !o.no_bos && (*tok)->add_bos_default();
    const std::vector<token_id> ids = (*tok)->tokenize(o.prompt, add_bos, o.parse_special);
    if (o.ids) {
        std::printf("%s\n", nlohmann::json(ids).dump().c_str());
        return 0;
    }
    for (token_id id : ids) {
        nlohmann::json piece = sanitize_utf8((*tok)->token_to_piece(id, true));
        std::printf("%6d -> %s\n", id, piece.dump().c_str());
    }
    return 0;
}

}  // namespace

void add_tokenize_command(CLI::App & app, command_runner & run) {
    auto o = std::make_shared<tokenize_options>();
    CLI::App * cmd = app.add_subcommand("tokenize", "Tokenize text with a model's vocabulary");
    cmd->add_option("-m,--model", o->model_path, "GGUF model or vocabulary file")->required()->check(CLI::ExistingFile);
    cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize")->required();
    cmd->add_flag("--ids", o->ids, "Print only a JSON array of token ids");
    cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token");
    cmd->add_flag("--parse-special", o->parse_special, "Map special-token text (e.g. <s>) to special tokens");
    cmd->callback([&run, o] { run = [o] { return run_tokenize(*o); }; });
}

}  // namespace skippy::cli
