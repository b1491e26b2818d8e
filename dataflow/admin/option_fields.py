"""One form field per connector option: its label, help text and default come from the
``Option`` the connector declares, so the admin shows what the validator checks."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.utils.html import format_html
from django.utils.safestring import SafeString

from source_support.options import Option

#: A value that is left out of the spec (the option's default applies).
OMIT = object()


def option_field_name(section: str, type_name: str, option_name: str) -> str:
    """The form field of an option: ``source__files__path``."""
    return f"{section}__{type_name}__{option_name}"


def option_help(option: Option) -> SafeString:
    """The option's help with its default, bounds and an example. Escaped: the admin shows
    help text as HTML."""
    parts = [format_html("{}", option.help)]
    if option.required:
        parts.append(SafeString("Required."))
    elif option.has_default:
        parts.append(format_html("Default: <code>{}</code>.", _shown(option, option.default)))
    if option.minimum is not None or option.maximum is not None:
        parts.append(format_html("{}", _bounds(option)))
    if option.example is not None:
        parts.append(format_html("Example: <code>{}</code>.", _shown(option, option.example)))
    if _types(option) == (list,):
        parts.append(SafeString("Separate values with commas."))
    return SafeString(" ".join(parts))


def _bounds(option: Option) -> str:
    if option.minimum is not None and option.maximum is not None:
        return f"Between {option.minimum} and {option.maximum}."
    if option.minimum is not None:
        return f"At least {option.minimum}."
    return f"At most {option.maximum}."


def _types(option: Option) -> tuple[type, ...]:
    return option.type if isinstance(option.type, tuple) else (option.type,)


def _shown(option: Option, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(map(str, value)) if _types(option) == (list,) else json.dumps(value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def option_form_field(option: Option) -> forms.Field:
    """A field that shows the option and takes its value. Never required at the form's
    level: the options of the types not chosen are left empty, and the validator says what
    a chosen type lacks, in its own words."""
    common = {"label": option.name, "help_text": option_help(option), "required": False}
    types = _types(option)
    if option.choices:
        blank = [] if option.has_default else [("", "---------")]
        return forms.TypedChoiceField(
            choices=[*blank, *((str(c), str(c)) for c in option.choices)],
            coerce=lambda v, choices=option.choices: next(c for c in choices if str(c) == v),
            empty_value=None,
            **common,
        )
    if types == (bool,):
        if option.has_default:
            return forms.BooleanField(**common)
        return forms.NullBooleanField(**common)
    if types == (int,):
        return forms.IntegerField(widget=_number(option), **common)
    if float in types:
        return forms.FloatField(widget=_number(option, step="any"), **common)
    if types == (list,):
        return forms.CharField(widget=forms.TextInput(attrs={"class": "vTextField"}), **common)
    if types == (dict,):
        return forms.JSONField(widget=forms.Textarea(attrs={"rows": 3, "class": "vLargeTextField"}), **common)
    return _text_field(option, common)


def _number(option: Option, step: str | None = None) -> forms.NumberInput:
    attrs = {"min": option.minimum, "max": option.maximum, "step": step}
    return forms.NumberInput(attrs={k: v for k, v in attrs.items() if v is not None})


def _text_field(option: Option, common: dict[str, Any]) -> forms.CharField:
    # The example is in the help text, not a placeholder: in the field it reads as a value
    # already filled in (an endpoint, a connection's name).
    attrs = {"class": "vTextField", "autocomplete": "off"}
    if option.secret == "value":
        # Shown as the mask, never as the secret; left as the mask, the stored one is kept.
        widget = forms.PasswordInput(attrs=attrs, render_value=True)
    else:
        widget = forms.TextInput(attrs=attrs)
    # Not stripped: a delimiter may be a space, and a path is taken as written.
    return forms.CharField(widget=widget, strip=False, **common)


def option_initial(option: Option, value: Any) -> Any:
    """What the field shows for a stored (already masked) or default value."""
    if value is None:
        return None
    if _types(option) == (list,) and isinstance(value, list):
        if any(isinstance(item, str) and (not item.strip() or "," in item) for item in value):
            return json.dumps(value)  # an empty text (null_values' default) or a comma
        return ", ".join(map(str, value))
    return value


def option_value(option: Option, cleaned: Any) -> Any:
    """The spec's value of a cleaned field, or ``OMIT`` where the field is empty or holds the
    default (left out, the default applies: the spec stays as short as a hand-written one,
    and an option that does not fit another part, such as a CSV header on a stream, is not
    given by accident)."""
    if cleaned is None or cleaned == "":
        return OMIT
    value = cleaned
    types = _types(option)
    if types == (list,):
        value = _list(option, cleaned)
    elif isinstance(cleaned, float) and int in types and cleaned.is_integer():
        value = int(cleaned)
    if value == option.default and type(value) is type(option.default):
        return OMIT
    if value == [] and option.default is None:
        return OMIT
    return value


def _list(option: Option, text: str) -> list | str:
    """Comma-separated items, or a JSON array (``["", "NA"]``: an empty text or a comma
    can be an item); text that starts as an array but is not one is kept for the
    validator to refuse, naming the field."""
    if text.strip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return text
        return items if isinstance(items, list) else text
    items = [item.strip() for item in text.split(",") if item.strip()]
    if option.items is int:
        return [int(item) if item.lstrip("-").isdigit() else item for item in items]
    return items
