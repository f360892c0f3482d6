"""``bench/peer.py``'s pure parts: the OpenNMT-py config and depnmt command line it builds, the
interleaving order, log parsing and the table (nothing is installed or run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script


def load_peer():
    """``bench/peer.py`` as a module (it is a script, not part of the package)."""
    return load_script("peer")


def test_onmt_config_is_the_issue_model():
    peer = load_peer()
    s = peer.Settings(lr=1e-3, warmup=400)
    cfg = peer.onmt_config(s, "abs", Path("bpe"), Path("out"), 25, 5, 100, ("en", "de"))
    expected = {"encoder_type": "transformer", "decoder_type": "transformer", "enc_layers": 3,
                "dec_layers": 3, "hidden_size": 256, "word_vec_size": 256,
                "transformer_ff": 1024, "heads": 4, "dropout": [0.1],
                "attention_dropout": [0.1], "position_encoding": True,
                "max_relative_positions": 0, "share_vocab": True, "share_embeddings": True,
                "share_decoder_embeddings": True, "label_smoothing": 0.1, "optim": "adam",
                "adam_beta2": 0.98, "decay_method": "noam", "batch_type": "tokens",
                "batch_size": 4096, "normalization": "tokens", "param_init_glorot": True,
                "train_steps": 25, "report_every": 5, "max_grad_norm": 0, "gpu_ranks": []}
    assert {k: cfg[k] for k in expected} == expected
    assert cfg["data"]["corpus_1"] == {"path_src": "bpe/train.en", "path_tgt": "bpe/train.de"}
    rel = peer.onmt_config(s, "rel", Path("bpe"), Path("out"), 25, 5, 100, ("en", "de"))
    assert rel["max_relative_positions"] == 2 and rel["position_encoding"] is True


def test_noam_peaks_at_depnmt_learning_rate():
    peer = load_peer()
    lr = peer.noam_learning_rate(1e-3, 256, 400)
    noam = [lr * 256 ** -0.5 * min(step ** -0.5, step * 400 ** -1.5) for step in (1, 400, 1600)]
    assert noam[1] == pytest.approx(1e-3)
    assert noam[0] == pytest.approx(1e-3 / 400)              # linear warm-up
    assert noam[2] == pytest.approx(1e-3 / 2)                # inverse square root decay


def test_depnmt_command_is_the_same_model():
    peer = load_peer()
    args = peer.depnmt_train_args(peer.Settings(), "rel", Path("bpe"), Path("m"), 25, 5)
    flags = dict(zip(args[1::2], args[2::2]))
    assert args[0] == "train" and "--share-all-embeddings" in args
    assert flags["--scheme"] == "abs+rel"
    for flag, value in {"--layers": "3", "--d-model": "256", "--heads": "4", "--d-ff": "1024",
                        "--dropout": "0.1", "--max-tokens": "4096", "--max-steps": "25",
                        "--log-every": "5", "--label-smoothing": "0.1"}.items():
        assert args[args.index(flag) + 1] == value
    assert args[args.index("--attention-dropout") + 1] == "0.1"


def test_interleaving_alternates_and_balances():
    peer = load_peer()
    order = peer.interleaved(3, ("depnmt", "onmt"))
    assert order == [(0, "depnmt"), (0, "onmt"), (1, "onmt"), (1, "depnmt"),
                     (2, "depnmt"), (2, "onmt")]
    three = [n for _, n in peer.interleaved(2, ("a", "b", "c"))]
    assert three == ["a", "b", "c", "c", "b", "a"]


def test_onmt_log_parsing_and_warmup_window_left_out():
    peer = load_peer()
    log = ("[2026-11-23 18:40:00,000 INFO] Step 5/   25; acc:   3.1; ppl: 9000.1; xent: 9.1; "
           "lr: 0.00001; sents:     904; bsz: 3012/3777/36; 500/600 tok/s;     31 sec;\n"
           "[2026-11-23 18:40:30,000 INFO] Step 10/   25; acc:   3.2; ppl: 8000.1; xent: 9.0; "
           "lr: 0.00002; sents:     900; bsz: 3000/3700/36; 1000/1200 tok/s;     62 sec;\n"
           "[2026-11-23 18:41:00,000 INFO] Step 15/   25; acc:   3.3; ppl: 7000.1; xent: 8.9; "
           "lr: 0.00003; sents:     900; bsz: 3000/3800/36; 1000/1400 tok/s;     93 sec;\n")
    windows = peer.parse_onmt_log(log)
    assert [w["step"] for w in windows] == [5, 10, 15]
    assert windows[0]["tgt_per_batch"] == 3777 and windows[1]["tgt_tokens_per_s"] == 1200
    assert peer.window_rate(windows) == pytest.approx(1300)   # 600 (warm-up) left out
    metrics = "\n".join(json.dumps(r) for r in (
        {"event": "start", "step": 0}, {"event": "train", "step": 5, "tgt_tokens_per_s": 10.0},
        {"event": "train", "step": 10, "tgt_tokens_per_s": 30.0}))
    assert peer.window_rate(peer.parse_depnmt_metrics(metrics)) == 30.0


def test_table_reports_ratio_depnmt_over_peer():
    peer = load_peer()
    text = peer.table([("training, abs, target tok/s", 2100.0, 1961.0),
                       ("missing", None, 5.0)])
    lines = text.splitlines()
    assert lines[0] == "| figure | OpenNMT-py | depnmt | ratio |"
    assert lines[2] == "| training, abs, target tok/s | 2,100 | 1,961 | **0.93** |"
    assert lines[3] == "| missing | – | 5.00 | **–** |"


def test_summary_from_result_files(tmp_path):
    peer = load_peer()
    (tmp_path / "train").mkdir()
    (tmp_path / "decode").mkdir()
    for tk, rnd, rate, rss in (("depnmt", 0, 300.0, 2000), ("onmt", 0, 200.0, 3000),
                               ("depnmt", 1, 500.0, 2100), ("onmt", 1, 250.0, 3100)):
        rec = {"scheme": "abs", "toolkit": tk, "round": rnd, "tgt_tokens_per_s": rate,
               "peak_rss_mb": rss, "load_before": "9.00 9.00 9.00", "load_after": "9.50 9 9"}
        if tk == "onmt":
            rec["tgt_per_batch"] = 3700.0
        (tmp_path / "train" / f"abs-{tk}-{rnd}.json").write_text(json.dumps(rec))
    (tmp_path / "train" / "depnmt-batch-fill.json").write_text(json.dumps({"tgt_per_batch": 3500}))
    text, info = peer.summarize(tmp_path)
    row = next(ln for ln in text.splitlines() if ln.startswith("| training, abs"))
    assert row == "| training, abs, target tok/s | 225 | 400 | **1.78** |"   # medians
    rss = next(ln for ln in text.splitlines() if ln.startswith("| peak RSS"))
    assert "| 3,100 | 2,100 | **0.68** |" in rss                           # maxima
    assert "| target tokens in a 4,096-token batch | 3,700 | 3,500 | **0.95** |" in text
    assert info["segments"] == 4


def test_summary_leaves_out_the_phases_not_run(tmp_path):
    """A work folder with decoding results only: no empty training rows."""
    peer = load_peer()
    (tmp_path / "decode").mkdir()
    for tk, sps in (("depnmt", 96.0), ("onmt", 92.0)):
        (tmp_path / "decode" / f"speed-{tk}-0.json").write_text(json.dumps(
            {"toolkit": tk, "sentences_per_s": sps, "load_before": "1.0 1 1",
             "load_after": "1.1 1 1"}))
    text, info = peer.summarize(tmp_path)
    assert "training" not in text and "peak RSS" not in text
    assert "| beam-4 decoding, sentences/s | 92.00 | 96.00 | **1.04** |" in text
    assert info["segments"] == 0 and info["decode_rounds"] == 2


def test_onmt_gold_score_is_summed_back_per_sentence():
    peer = load_peer()
    log = ("[2026-11-24 00:10:00,000 INFO] PRED SCORE: -0.1234, PRED PPL: 1.13 NB SENTENCES: 1014\n"
           "[2026-11-24 00:10:00,000 INFO] GOLD SCORE: -25.5000, GOLD PPL: 1.2e11 NB SENTENCES: 4\n")
    assert peer.onmt_gold_nll(log) == pytest.approx(102.0)
    with pytest.raises(Exception, match="GOLD"):
        peer.onmt_gold_nll("PRED SCORE: -1.0, PRED PPL: 2.7 NB SENTENCES: 3")


def test_tokens_seen_and_interpolation_at_equal_tokens():
    peer = load_peer()
    windows = [{"step": 100, "tgt_per_batch": 3000.0}, {"step": 200, "tgt_per_batch": 3500.0},
               {"step": 300, "tgt_per_batch": 4000.0}]
    assert peer.tokens_seen(windows, 200) == 650_000
    assert peer.tokens_seen(windows, 250) == 250 * 3250
    pts = [(2000.0, 3.0), (1000.0, 5.0)]           # unsorted on purpose
    assert peer.at_tokens(pts, 1500.0) == pytest.approx(4.0)
    assert peer.at_tokens(pts, 1000.0) == pytest.approx(5.0)
    assert peer.at_tokens(pts, 2500.0) is None and peer.at_tokens(pts, 500.0) is None
    assert peer.chunk_targets(1000, 250) == [250, 500, 750, 1000]
    assert peer.chunk_targets(900, 250) == [250, 500, 750, 900]


def test_devloss_table_compares_at_opennmt_token_counts(tmp_path):
    peer = load_peer()
    rows = [{"toolkit": "depnmt", "step": 250, "dev_nll": 4.0, "tgt_tokens_seen": 1000},
            {"toolkit": "depnmt", "step": 500, "dev_nll": 3.0, "tgt_tokens_seen": 2000},
            {"toolkit": "onmt", "step": 250, "dev_nll": 4.2, "tgt_tokens_seen": 900},
            {"toolkit": "onmt", "step": 500, "dev_nll": 3.5, "tgt_tokens_seen": 1500}]
    path = tmp_path / "devloss.json"
    path.write_text(json.dumps(rows))
    text = peer.devloss_table(path)
    line500 = next(ln for ln in text.splitlines() if ln.startswith("| 500 "))
    # depnmt at 1,500 tokens: halfway between 4.0 and 3.0 = 3.5, equal to OpenNMT-py's
    assert "| 3.5000 | +0.0% |" in line500
    line250 = next(ln for ln in text.splitlines() if ln.startswith("| 250 "))
    assert line250.endswith("| – | – |")          # 900 tokens: before depnmt's first point
    assert peer.devloss_table(tmp_path / "missing.json") == ""


def test_depnmt_tokens_seen_counts_batches_across_epochs(tmp_path):
    peer = load_peer()
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    (bpe / "train.en").write_text("a b\nc\nd e f\ng\n")
    (bpe / "train.de").write_text("x\ny z\nw\nv u t s\n")
    p = peer.Peer.__new__(peer.Peer)
    p.bpe, p.langs, p.s = bpe, ("en", "de"), peer.Settings(max_tokens=6)
    from depnmt.data.batches import TokenBatcher
    lengths = [(3, 2), (2, 3), (4, 2), (2, 5)]
    batcher = TokenBatcher(lengths, 6, 1)
    order = batcher.batches(1) + batcher.batches(2)
    n = len(batcher.batches(1))
    for steps in (1, n, n + 1):
        assert p.depnmt_tokens_seen(steps) == sum(lengths[i][1] for b in order[:steps] for i in b)
