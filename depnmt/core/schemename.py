"""The name of a saved model's scheme (``abs+dep+rel``, ``noabs+dep``), without importing torch.

What a name *means* — its components and options — is :mod:`depnmt.model.schemes.names`, which
needs the scheme registry and so torch; turning a model config's ``schemes`` entries into their
name needs neither, and ``report``, ``runs`` and ``archive`` read names of many saved models
(importing torch would cost them more than a second of start-up).
"""

from __future__ import annotations

from typing import Any

from depnmt.core.compat import OLD_PARTS

ABS, NOABS = "abs", "noabs"


def scheme_name(entries: list[dict[str, Any]]) -> str:
    """Today's name of a model config's ``schemes`` (components only: variants' options are
    the entries' options), e.g. ``abs+dbsa-enc`` or ``noabs+dep``."""
    parts = [OLD_PARTS.get(e["name"], e["name"].replace("_", "-")) for e in entries]
    if parts == [NOABS]:
        return NOABS
    return "+".join(parts if ABS in parts else [NOABS] + parts)
