// The `skippy` subcommands. Each registers its flags on the CLI11 app and runs when
// selected; results go to stdout, everything else to stderr. Exit codes: 0 success,
// 1 runtime failure (bad file, failed request), 2 usage error (CLI11's).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace skippy::cli {

// Registers a subcommand; sets `run` to the function to call when it is selected.
using command_runner = std::function<int()>;

void add_generate_command(CLI::App & app, command_runner & run);
void add_eval_logits_command(CLI::App & app, command_runner & run);
void add_tokenize_command(CLI::App & app, command_runner & run);
void add_make_model_command(CLI::App & app, command_runner & run);
void add_serve_command(CLI::App & app, command_runner & run);
void add_bench_command(CLI::App & app, command_runner & run);
void add_stage_commands(CLI::App & app, command_runner & run);
void add_bench_cache_command(CLI::App & app, command_runner & run);

}  // namespace skippy::cli
