"""Shared types and plumbing every layer may use: errors, logging, text I/O, dependency trees and
CoNLL-U sentences, vocabularies, worker pools."""
