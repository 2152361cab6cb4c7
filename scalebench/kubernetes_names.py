"""The names Kubernetes accepts, declared once for the request form and the site settings.

- a DNS-1123 **label** (a namespace, a container): at most 63 lower-case letters, digits
  and ``-``, alphanumeric at both ends;
- a DNS-1123 **subdomain** (most object names: a claim, a secret, a service account):
  labels joined by ``.``, at most 253 characters;
- an **object name that is also a label value** (a Kueue LocalQueue, a PriorityClass:
  Kueue copies both into labels of the workloads it makes): a subdomain of at most 63;
- a **qualified name** (a label or annotation key): an optional subdomain prefix and
  ``/``, then at most 63 letters, digits, ``-``, ``_`` or ``.``, alphanumeric at both ends;
- a **label value**: empty, or like a qualified name's last part.

:data:`LABELLED_NAME_PATTERN` is the third rule as a regular expression (the form's field
pattern, a JSON-schema ``pattern``); :func:`is_labelled_name` is the same rule in code.
"""

from __future__ import annotations

import re

MAX_LABEL = 63
MAX_SUBDOMAIN = 253
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"

# A subdomain of at most 63 characters, for a form field's pattern.
LABELLED_NAME_PATTERN = rf"(?=.{{1,{MAX_LABEL}}}$){_SUBDOMAIN}"


def is_label(name: str) -> bool:
    """A DNS-1123 label: a namespace or a container name."""
    return len(name) <= MAX_LABEL and re.fullmatch(_LABEL, name) is not None


def is_subdomain(name: str) -> bool:
    """A DNS-1123 subdomain: most objects' names."""
    return len(name) <= MAX_SUBDOMAIN and re.fullmatch(_SUBDOMAIN, name) is not None


def is_labelled_name(name: str) -> bool:
    """An object name that is also a label value: a subdomain of at most 63 characters."""
    return len(name) <= MAX_LABEL and re.fullmatch(_SUBDOMAIN, name) is not None


def is_label_value(value: str) -> bool:
    """A label's value: empty, or at most 63 characters with alphanumeric ends."""
    return value == "" or (len(value) <= MAX_LABEL and re.fullmatch(_NAME_PART, value) is not None)


def is_qualified_name(key: str) -> bool:
    """A label or annotation key: ``[subdomain/]name``."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and is_subdomain(prefix)):
        return False
    return len(name) <= MAX_LABEL and re.fullmatch(_NAME_PART, name) is not None
