"""How every ``--help`` page looks: rendered by rich-click, options grouped into titled sections.

The command modules declare plain click commands; :func:`rich_command` gives the CLI a
rich-click copy of each (the module's own object stays as it is) with the option groups of
:data:`OPTION_GROUPS` and an epilog (the command's worked example, :mod:`.examples`). An
option that no group names is listed under "Options", so a new flag is never lost. Options are
named by their Python parameter names, which stay when flags are renamed. Without a terminal
(a pipe, a file, the tests) the output is plain text: no colours, no boxes.
"""

from __future__ import annotations

import copy
import inspect
import sys

import click
from rich_click import RichCommand, RichContext, RichGroup, RichHelpConfiguration
from rich_click.rich_help_formatter import RichHelpFormatter
from rich_click.rich_panel import RichCommandPanel, RichOptionPanel

THEME = "default-slim"          # sections as `Title:` headings, options as in click's own help
WIDTH = 100                     # the widest help page (without a terminal: its width)


def search_group(command: str, shown: list[str]) -> list[str]:
    """The search options of ``command`` in its help's order: ``shown``, then any other
    :class:`~depnmt.core.searchlimits.SearchConfig` field (a new one is in its section at once)."""
    from depnmt.core.searchlimits import search_params
    names = [p.name for p in search_params(command)]
    return [n for n in shown if n in names] + [n for n in names if n not in shown]


# command path -> [(section title, [parameter names])]; train's scheme options are added
# from the scheme registry (scheme_groups)
OPTION_GROUPS: dict[str, list[tuple[str, list[str]]]] = {
    "prepare": [
        ("Corpus", ["config_file", "corpus", "train_src", "train_tgt", "dev_src", "dev_tgt", "test_src",
                    "test_tgt", "src_lang", "tgt_lang", "out_dir"]),
        ("Tokenization", ["tokenizer_src", "tokenizer_tgt", "lowercase"]),
        ("Filters", ["first", "max_len", "min_len", "filter_eval", "langid_filter", "max_pairs"]),
        ("Dev and test splits", ["dev_size", "test_size"]),
        ("Processes", ["jobs"]),
    ],
    "parse": [
        ("Input and output", ["config_file", "prepare_dir", "out_dir", "side", "splits"]),
        ("Parser", ["backend", "models", "langs", "stanza_dir", "conllu_dir", "batch_size"]),
        ("Work split over processes", ["jobs", "shard", "merge"]),
    ],
    "controls": [
        ("Input and output", ["parse_dir", "out_dir", "side"]),
        ("Control", ["kind", "seed", "labels", "noise"]),
    ],
    "bpe": [
        ("Input and output", ["config_file", "prepare_dir", "out_dir"]),
        ("Subwords", ["mode", "merges", "joint", "vocab_threshold", "merge_min_freq"]),
        ("Vocabulary", ["min_freq", "src_min_freq", "tgt_min_freq", "max_vocab"]),
        ("Processes", ["jobs"]),
    ],
    "train": [
        ("Data and model folder", ["config_file", "data_dir", "model_dir", "trees_dir",
                                   "resume", "resume_on_changed_data", "init_from",
                                   "train_init_partial", "check_settings"]),
        ("Model size", ["scheme", "layers", "arch_encoder_layers", "arch_decoder_layers",
                        "arch_d_model", "arch_n_heads", "arch_d_ff", "arch_tie_decoder_embeddings",
                        "arch_share_all_embeddings"]),
        ("Batches", ["train_max_tokens", "train_batch_sentences", "train_update_freq",
                     "train_max_len", "train_workers"]),
        ("Optimisation", ["train_lr", "train_warmup", "train_label_smoothing", "train_clip_norm",
                          "arch_dropout", "arch_attention_dropout", "train_seed"]),
        ("Budget and stopping", ["train_max_epochs", "train_max_steps", "train_max_minutes",
                                 "train_patience", "train_early_stop_metric"]),
        ("Validation", ["train_valid_every", "train_valid_beam", "train_valid_max_sentences"]),
        ("Checkpoints", ["train_save_every", "train_keep_last"]),
        ("Translation defaults (saved with the model)",
         search_group("train", ["search_beam", "search_alpha", "search_length_penalty"])),
        ("Hardware and precision", ["train_device", "train_precision", "train_amp",
                                    "train_compile"]),
        ("Logging", ["train_log_every", "tensorboard"]),
    ],
    "translate": [
        ("Model", ["model_dirs", "checkpoint", "ct2_dir"]),
        ("Input and output", ["input_path", "input_format", "output_path", "nbest"]),
        ("Search", search_group("translate", ["beam", "alpha", "length_penalty", "max_len_a",
                                              "max_len_b", "at_limit"])),
        ("Batches and hardware", ["max_tokens", "batch_size", "device", "precision", "threads"]),
        ("Trees a DBSA model induces", ["induced_trees", "induced_target_trees",
                                        "dbsa_gold_arcs"]),
    ],
    "rescore": [
        ("Model", ["model_dirs", "checkpoint"]),
        ("Input and output", ["src_path", "src_format", "tgt_path", "output_path", "per_token"]),
        ("Score", search_group("rescore", ["alpha", "length_penalty"])),
        ("Batches and hardware", ["max_tokens", "batch_size", "device", "precision"]),
    ],
    "minimal-pairs": [("Input and output", ["src_path", "ref_path", "lang", "output_path"])],
    "contrastive": [
        ("Models", ["model_dirs", "ensemble", "checkpoint"]),
        ("Contrastive set", ["set_path", "fmt", "src_path", "tgt_path", "normalized",
                             "output_path", "compare_paths"]),
        ("Batches and hardware", ["max_tokens", "batch_size", "device", "precision"]),
    ],
    "score": [
        ("References and sources", ["refs", "src", "tokenize", "lang"]),
        ("Metrics", ["metric_names", "chrf_word_order"]),
        ("Significance", ["n_samples", "seed"]),
        ("Length buckets", ["buckets", "bucket_plot"]),
        ("Output", ["as_json"]),
    ],
    "report": [
        ("Systems", ["refs", "systems", "folders", "baselines", "prefix"]),
        ("BLEU and chrF", ["tokenize", "lang"]),
        ("Significance", ["n_samples", "shuffles", "seed", "deltas"]),
    ],
}


def scheme_groups() -> list[tuple[str, list[str]]]:
    """``train``'s scheme options, one section per set of scheme parts that use them (from
    the scheme registry: ``Scheme options: dep``, ``Scheme options: rel, deplabel+rel``, ...)."""
    from depnmt.model.schemes import registry
    shown = {joint: "+".join(parts) for parts, joint in registry.FUSIONS.items()}
    groups: dict[tuple[str, ...], list[str]] = {}
    for option, users in registry.declared_options().items():
        names = tuple(shown.get(user, user.replace("_", "-")) for user in users)
        groups.setdefault(names, []).append(option)
    return [(f"Scheme options: {', '.join(users)}", options) for users, options in groups.items()]


def option_panels(path: str) -> list[RichOptionPanel]:
    """The option sections of the command at ``path`` (e.g. ``"train"``, ``"analyze awsl"``)."""
    groups = OPTION_GROUPS.get(path, [])
    if path == "train":
        groups = [*groups, *scheme_groups()]
    return [ClickRowsPanel(title, options=names) for title, names in groups]


def help_config(commands_title: str = "Commands") -> RichHelpConfiguration:
    """rich-click's settings of every help page: :data:`THEME`, at most :data:`WIDTH` columns
    (exactly that without a terminal, so that example lines are not wrapped); colours only on
    a terminal or with FORCE_COLOR (not for rich-click's GITHUB_ACTIONS or PY_COLORS)."""
    width = None if sys.stdout is not None and sys.stdout.isatty() else WIDTH
    return RichHelpConfiguration(theme=THEME, width=width, max_width=WIDTH, force_terminal=None,
                                 commands_panel_title=commands_title)


class ShownAsWritten:
    """What depnmt's help pages change in rich-click's: the help text is laid out as click lays
    it out (paragraphs refilled, ``\\b`` blocks kept as written), the epilog (the worked
    example) keeps its lines, and no line ends in spaces."""

    def format_help_text(self, ctx: click.Context, formatter: RichHelpFormatter) -> None:
        if self.help:
            text = inspect.cleandoc(self.help).partition("\f")[0]
            self._write_text(click.formatting.wrap_text(
                text, formatter.console.width, preserve_paragraphs=True),
                formatter.config.style_helptext, formatter.config.padding_helptext, formatter)

    def format_epilog(self, ctx: click.Context, formatter: RichHelpFormatter) -> None:
        if self.epilog:
            self._write_text(self.epilog.replace("\b\n", ""), formatter.config.style_epilog_text,
                             formatter.config.padding_epilog, formatter)

    @staticmethod
    def _write_text(text: str, style, padding, formatter: RichHelpFormatter) -> None:
        """Write ``text`` line for line in ``style`` (no markup; only a line wider than the page
        wraps)."""
        from rich.padding import Padding
        from rich.text import Text
        formatter.write(Padding(Text(text, style=style), padding))

    def get_help(self, ctx: click.Context) -> str:
        return without_trailing_spaces(super().get_help(ctx))

    def get_usage(self, ctx: click.Context) -> str:
        return without_trailing_spaces(super().get_usage(ctx)).strip("\n")


def without_trailing_spaces(text: str) -> str:
    """``text`` with no line ending in spaces (rich pads every line to the page width)."""
    return "\n".join(line.rstrip() for line in text.splitlines())


class LazyCommandPanel(RichCommandPanel):
    """The commands section of a group that lists its commands without importing them: the
    group's ``command_summaries()`` (name -> one-line help) instead of its commands."""

    @classmethod
    def list_all_objects(cls, ctx: click.Context) -> list[tuple[str, click.Command]]:
        if not hasattr(ctx.command, "command_summaries"):
            return super().list_all_objects(ctx)
        return [(name, stub) for name, stub in summary_stubs(ctx.command).items()]

    def get_objects(self, command: click.Command, ctx: click.Context):
        if not hasattr(command, "command_summaries"):
            yield from super().get_objects(command, ctx)
            return
        stubs = summary_stubs(command)
        yield from (stubs[name] for name in self.commands if name in stubs)


def summary_stubs(group) -> dict[str, click.Command]:
    """Name -> a stand-in command holding only the one-line help, for the commands section."""
    return {name: click.Command(name, help=summary, short_help=summary)
            for name, summary in group.command_summaries().items()}


class ClickRowsPanel(RichOptionPanel):
    """A section of options whose rows are click's own: ``-i, --input DIR`` and the help with
    click's ``[default: 4000; x>=1]``, so a page reads as click's, only in sections."""

    def get_table(self, command: click.Command, ctx: click.Context,
                  formatter: RichHelpFormatter):
        from rich.text import Text
        table = self._get_base_table(box=None, pad_edge=False, padding=(0, 2), expand=False)
        for param in self.get_objects(command, ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                table.add_row(Text(record[0], style=formatter.config.style_option),
                              Text(record[1]))
        return table


class HelpFormatter(RichHelpFormatter):
    """rich-click's formatter with depnmt's sections: click's option rows, and the commands
    of a lazily importing group listed without importing them."""

    option_panel_class = ClickRowsPanel
    command_panel_class = LazyCommandPanel


class HelpContext(RichContext):
    """The context of every depnmt command: its help pages use :class:`HelpFormatter`."""

    formatter_class = HelpFormatter


class OneValueEach:
    """A command whose options that take one value are given at most once each: click would
    keep the last of ``-m A -m B`` silently; here it is a usage error naming the option (exit
    status 2). Options given several times on purpose (``multiple=True``) and counts
    (``-vv``) are not checked, nor ``--help`` and ``--version``."""

    def make_parser(self, ctx: click.Context):
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_args(args: list[str]):
            opts, largs, order = parse(args)      # order: a parameter per occurrence
            if not ctx.resilient_parsing:
                check_given_once(ctx, order)
            return opts, largs, order
        parser.parse_args = parse_args
        return parser


def check_given_once(ctx: click.Context, order: list[click.Parameter]) -> None:
    """A :class:`click.UsageError` naming the first option of ``order`` (the parameters in the
    order the command line gave them, one entry per occurrence) given again though it takes
    one value."""
    seen: set[int] = set()
    for param in order:
        if not takes_one_value(param):
            continue
        if id(param) in seen:
            names = "/".join([*param.opts, *param.secondary_opts])
            why = "a flag: give it once" if param.is_flag else "it takes one value"
            raise click.UsageError(f"option {names} given twice ({why})", ctx=ctx)
        seen.add(id(param))


def takes_one_value(param: click.Parameter) -> bool:
    """Whether ``param`` is an option whose repetition would silently drop a value: not
    ``multiple``, not a count, not an eager flag that acts when seen (``--help``,
    ``--version``)."""
    if not isinstance(param, click.Option) or param.multiple or param.count:
        return False
    return not (param.is_flag and param.is_eager and not param.expose_value)


class HelpCommand(OneValueEach, ShownAsWritten, RichCommand):
    """A command's help page as depnmt shows it (and its options given once each)."""

    context_class = HelpContext


class HelpGroup(OneValueEach, ShownAsWritten, RichGroup):
    """A group's help page as depnmt shows it (and its options given once each)."""

    context_class = HelpContext


def rich_class(cls: type[click.Command]) -> type[RichCommand]:
    """The rich-click class that renders a command of class ``cls``."""
    base = HelpGroup if issubclass(cls, click.Group) else HelpCommand
    if cls in (click.Command, click.Group):
        return base
    return type(f"Rich{cls.__name__}", (base, cls), {})


def rich_command(command: click.Command, path: str, epilog) -> RichCommand:
    """A rich-click copy of ``command`` (the command at ``path``; a group's subcommands
    too) with its option sections and ``epilog(path)`` as its epilog. The copy shares the
    original's parameters and callback, so it parses and runs exactly as the original."""
    rich = copy.copy(command)
    rich.__class__ = rich_class(type(command))
    rich.panels, rich.panel, rich.aliases, rich._help_option = option_panels(path), None, [], None
    rich.epilog = epilog(path) or command.epilog
    rich.context_settings = {**command.context_settings, "rich_help_config": help_config()}
    if isinstance(command, click.Group):
        rich.commands = {name: rich_command(sub, f"{path} {name}", epilog)
                         for name, sub in command.commands.items()}
        rich._alias_mapping, rich._panel_command_mapping = {}, {}
    return rich
