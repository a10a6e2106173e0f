"""Pipeline stages as Python objects, one class per op of `prepflow ops`.

    from prepflow import ops
    pipeline = [ops.Decode(), ops.RandomResizedCrop(size=224),
                ops.ColorJitter(brightness=0.4, contrast=0.4),
                ops.RandomHorizontalFlip(), ops.Normalize()]
    loader = prepflow.Loader(data, pipeline)

Class names are the op names in CamelCase (random_resized_crop is
RandomResizedCrop); keyword arguments are the op's fields, with the same names,
types and defaults as in pipeline text (docs/ops.md). A list field takes a
list or one value; an enum field takes its name ("INTERPOLATION_NEAREST") or
the short form ("nearest"). Values are checked by the same code that checks
pipeline files, when the loader is created; an unknown field is a TypeError
here, listing the op's fields.
"""
import copy
import math

from . import _prepflow

__all__ = ["Op", "pipeline_text", "names"]


class Op:
    """One pipeline stage: `name` (as in pipeline text) and its `fields`."""

    name = None  # set on each generated class
    schema = None
    # The field of a record the stage works on ("jpg", "flac"; None: the
    # sample's media): Op(..., field="flac"), or a pipeline given as a dict.
    field = None

    def __init__(self, *, field=None, **fields):
        if field is not None:
            self.field = _check_field(field, type(self).__name__)
        known = {f["name"]: f for f in self.schema["fields"]}
        for key in fields:
            if key not in known:
                listed = ", ".join(known) or "none"
                raise TypeError(f"{type(self).__name__}: no field '{key}'; its fields are: {listed}")
        self.fields = {k: v for k, v in fields.items() if v is not None}
        # Formatting now reports a bad value where the op is written.
        body = " ".join(_field_text(known[k], v, type(self).__name__)
                        for k, v in self.fields.items())
        self._text = f"{self.name} {{ {body} }}" if body else f"{self.name} {{}}"

    def text(self):
        """The stage as pipeline text: 'color_jitter { brightness: [0.6, 1.4] }'."""
        return self._text

    def on(self, field):
        """The same stage, working on record field `field`."""
        out = copy.copy(self)
        out.field = _check_field(field, type(self).__name__)
        return out

    def __repr__(self):
        args = [f"{k}={v!r}" for k, v in self.fields.items()]
        if self.field is not None:
            args.append(f"field={self.field!r}")
        return f"{type(self).__name__}({', '.join(args)})"

    def __eq__(self, other):
        return isinstance(other, Op) and (self.text(), self.field) == (other.text(), other.field)

    def __hash__(self):
        return hash((self.text(), self.field))


def _check_field(field, where):
    if not isinstance(field, str) or not field or len(field) > 64 or not all(
            c.isascii() and (c.isalnum() or c in "._-;") for c in field):
        raise ValueError(f"{where}: field: {field!r} is not a field name (1-64 letters, digits "
                         "and . _ - ; as 'jpg;png')")
    return field


def _scalar_text(kind, value, field, where):
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where}: {field['name']}: expected a number, got {value!r}")
        v = float(value)
        return "nan" if math.isnan(v) else repr(v)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: {field['name']}: expected an int, got {value!r}")
        return str(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "enum":
        name = getattr(value, "value", value)  # torchvision's InterpolationMode
        for choice in field["choices"]:
            if str(name).upper() in (choice, choice.split("_", 1)[-1]):
                return choice
        raise ValueError(f"{where}: {field['name']}: {value!r} is not one of "
                         f"{', '.join(field['choices'])}")
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _field_text(field, value, where):
    kind = field["type"]
    if kind.startswith("map of "):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: {field['name']}: expected a dict, got {value!r}")
        return " ".join(f"{field['name']} {{ key: {_scalar_text('string', k, field, where)} "
                        f"value: {_scalar_text('string', v, field, where)} }}"
                        for k, v in sorted(value.items()))
    if kind == "list of stage":  # a composition's inner stages: Op objects
        items = value if isinstance(value, (list, tuple)) else [value]
        for v in items:
            if not isinstance(v, Op) or v.schema["batch"]:
                raise TypeError(f"{where}: {field['name']}: expected prepflow.ops objects "
                                f"(not batch ops), got {v!r}")
        return " ".join(f"{field['name']} {{ {v.text()} }}" for v in items)
    if kind.startswith("list of "):
        items = value if isinstance(value, (list, tuple)) else [value]
        inner = ", ".join(_scalar_text(kind[8:], v, field, where) for v in items)
        return f"{field['name']}: [{inner}]"
    return f"{field['name']}: {_scalar_text(kind, value, field, where)}"


def pipeline_text(stages, name=None, carry=()):
    """Pipeline text for a sequence of Op objects; batch ops (MixupCutmix) go
    to `batch_stages`, run on the trainer after batching. `carry`: record
    fields carried to the batch untouched."""
    lines = [f'name: "{name}"'] if name else []
    for stage in stages:
        if not isinstance(stage, Op):
            raise TypeError(f"expected prepflow.ops objects, got {stage!r}")
        kind = "batch_stages" if stage.schema["batch"] else "stages"
        on = f' field: "{stage.field}"' if stage.field is not None else ""
        lines.append("%s { %s%s }" % (kind, stage.text(), on))
    for field in carry:
        lines.append(f'carry: "{_check_field(field, "carry")}"')
    return "\n".join(lines) + "\n"


def _class_name(op_name):
    return "".join(part.capitalize() for part in op_name.split("_"))


def _make_class(schema):
    lines = [schema["summary"], ""]
    if schema["batch"]:
        lines.append("A batch op: pass it in Loader(batch_ops=[...]) or in a pipeline list.")
    if schema["torchvision"]:
        lines.append(f"torchvision: {schema['torchvision']}. Parity: {schema['parity']}.")
    for f in schema["fields"]:
        default = f" (default {f['default']})" if f["default"] else ""
        lines.append(f"  {f['name']} ({f['type']}){default}: {f['summary']}")
    return type(_class_name(schema["name"]), (Op,),
                {"name": schema["name"], "schema": schema, "__doc__": "\n".join(lines),
                 "__module__": __name__})


names = []
for _schema in _prepflow.ops_schema():
    _cls = _make_class(_schema)
    globals()[_cls.__name__] = _cls
    names.append(_cls.__name__)
    __all__.append(_cls.__name__)
del _schema, _cls


class Custom(Custom):  # noqa: F821 (the generated class)
    """An op from a plugin (Loader(plugins=[...]), pipeline/ops/plugin_api.h):
    Custom("sepia", strength=0.8). Parameters go to the plugin as text."""

    def __init__(self, name, **params):
        super().__init__(name=name, params={k: _param_text(v) for k, v in params.items()})

    def __repr__(self):
        args = "".join(f", {k}={v}" for k, v in sorted(self.fields["params"].items()))
        return f"Custom({self.fields['name']!r}{args})"


def _param_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
