#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"

#include <cstdio>

int main(int argc, char ** argv) {
    CLI::App app{"skippy: a pipelined LLM runtime with a prefix KV cache on every stage"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every subcommand");
    int verbosity = 0;
    app.add_flag("-v,--verbose", verbosity, "More log output on stderr (repeat for debug)");
    bool quiet = false;
    app.add_flag("-q,--quiet", quiet, "Only errors on stderr");

    skippy::cli::command_runner run;
    skippy::cli::add_generate_command(app, run);
    skippy::cli::add_eval_logits_command(app, run);
    skippy::cli::add_tokenize_command(app, run);
    skippy::cli::add_make_model_command(app, run);
    skippy::cli::add_serve_command(app, run);
    skippy::cli::add_bench_command(app, run);
    skippy::cli::add_stage_commands(app, run);
    skippy::cli::add_bench_cache_command(app, run);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        // CLI11 prints the message (or the help) and picks a code per error kind; the
        // documented contract is 0 for help and 2 for every usage error.
        return app.exit(e) == 0 ? 0 : 2;
    }
    skippy::set_log_level(quiet ? skippy::log_level::error : verbosity > 0 ? skippy::log_level::debug : skippy::log_level::info);
    if (!run) return 2;
    if (const skippy::status st = skippy::cli::apply_kernels_flag(); !st) {
        std::fprintf(stderr, "skippy: error: %s\n", st.to_string().c_str());
        return 2;
    }
    return run();
}
