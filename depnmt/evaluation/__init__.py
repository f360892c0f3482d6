"""Evaluation: score, significance, report, runs, archive, contrastive and minimal pairs, analyze,
inspect, figures."""
