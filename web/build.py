"""Build the web edition: the stored lessons as a static bilingual site (Jupyter Book 1).

``./dev site`` runs this. For each language it lays out a book in ``build/site/src/<lang>/``: the
shared settings (``web/_config.yml``, ``web/_toc.yml``, ``web/_templates``, ``web/_static``) with
that language's own (``LANGUAGES``), its start page (``web/<lang>/index.md``), the glossary, and a
copy of each stored lesson (``notebooks/<lang>/*.ipynb``, with the outputs notebooks/build.py
wrote; nothing is executed). In the copies each dashboard's widget output becomes its static view
(``static_view``), drawn from the widget state the notebook saved, so the site needs no widget
JavaScript from the internet. Jupyter Book builds each book; the pages land in
``build/site/html/<lang>/`` beside a start page that offers both languages. Both books have the
same page names, so a page's language switch is the same name in the other folder.
"""

from __future__ import annotations

import argparse
import html
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
WEB = REPO / "web"
OUT = REPO / "build" / "site"
SHARED = ("_toc.yml", "_templates", "_static")
GLOSSARY = REPO / "notebooks" / "GLOSSARY.md"
# Jupyter Book's command, from the environment that runs this script (it has no `python -m` entry).
JUPYTER_BOOK = str(Path(sys.executable).parent / "jupyter-book")

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# What each language's book sets on top of web/_config.yml. The Binder path is the reader's copy of
# the lessons that binder/postBuild makes, as in the README's badges.
LANGUAGES: dict[str, dict[str, Any]] = {
    "en": {
        "title": "leaselab: leases, fencing, at-least-once",
        "language": "en",
        "smartquotes": True,
        "path_to_book": "my-lessons/en",
        "search": "Search the course…",
        "other": "ru",
        "other_label": "По-русски",
        "other_title": "Эта страница по-русски",
        "note": "A static view of the dashboard as it was when the lesson was built; run the lesson to use it.",
    },
    "ru": {
        "title": "leaselab: аренда, fencing, at-least-once",
        "language": "ru",
        # Russian smart quotes would turn the glossary's English apostrophes into „ and “; the Russian
        # lessons already write their «» and „“ themselves.
        "smartquotes": False,
        "path_to_book": "my-lessons/ru",
        "search": "Поиск по курсу…",
        "other": "en",
        "other_label": "English",
        "other_title": "This page in English",
        "note": "Снимок панели в том виде, в каком она была при сборке урока; чтобы нажимать кнопки, выполните урок.",
    },
}


# -- the widgets' static views -----------------------------------------------------------------


def static_view(model_id: str, models: dict[str, Any]) -> str:
    """HTML for the widget ``model_id`` and its children, from the state a notebook saved.

    Boxes become flex rows or columns, HTML widgets their HTML (which leaselab's dashboard made),
    buttons, inputs and drop-downs disabled controls with their labels and values, images their
    picture; a widget hidden by its layout, an empty image and models of other kinds are left out.
    """
    model = models.get(model_id.removeprefix("IPY_MODEL_"))
    if model is None:
        return ""
    state = model.get("state", {})
    layout = models.get(str(state.get("layout", "")).removeprefix("IPY_MODEL_"), {}).get("state", {})
    if layout.get("display") == "none" or layout.get("visibility") == "hidden":
        return ""
    name = model.get("model_name", "")
    classes = " ".join(html.escape(c) for c in state.get("_dom_classes", []))
    label = html.escape(str(state.get("description") or ""))
    labelled = f"<label>{label}</label>" if label else ""
    if name in ("VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel"):
        inner = "".join(static_view(child, models) for child in state.get("children", []))
        kind = "lsv-box lsv-vbox" if name == "VBoxModel" else "lsv-box"
        return f'<div class="{kind} {classes}">{inner}</div>'
    if name in ("HTMLModel", "HTMLMathModel"):
        return f'<div class="{classes}">{state.get("value", "")}</div>'
    if name == "LabelModel":
        return f'<span class="{classes}">{html.escape(str(state.get("value", "")))}</span>'
    if name in ("ButtonModel", "ToggleButtonModel"):
        return f'<button type="button" class="{classes}" disabled>{label}</button>'
    if name in ("DropdownModel", "SelectModel"):
        index = state.get("index")
        options = "".join(
            f"<option{' selected' if i == index else ''}>{html.escape(str(o))}</option>"
            for i, o in enumerate(state.get("_options_labels", []))
        )
        return f'<span class="{classes}">{labelled}<select disabled>{options}</select></span>'
    if name.endswith("TextModel") or name in ("TextareaModel", "CheckboxModel"):
        value = html.escape(str(state.get("value", "")))
        return f'<span class="{classes}">{labelled}<input disabled value="{value}" size="8"></span>'
    if name == "ImageModel":
        picture = next((b["data"] for b in model.get("buffers", []) if b.get("path") == ["value"]), "")
        if not picture:
            return ""
        fmt = html.escape(str(state.get("format", "png")))
        return f'<img class="{classes}" alt="" src="data:image/{fmt};base64,{picture}">'
    return ""


def with_static_widgets(nb: dict[str, Any], note: str) -> dict[str, Any]:
    """The notebook with each widget output replaced by its static view, and no widget state left."""
    models = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            view = data.pop(WIDGET_VIEW, None)
            if view is None:
                continue
            body = static_view(view["model_id"], models)
            if body:
                data.pop("text/plain", None)
                data["text/html"] = (
                    f'<div class="leaselab-static">{body}</div><p class="leaselab-static-note">{html.escape(note)}</p>'
                )
    return nb


# -- the books ----------------------------------------------------------------------------------


def lay_out(lang: str, dest: Path) -> None:
    """Put the book for ``lang`` together in ``dest``: settings, pages and the lessons' copies."""
    words = LANGUAGES[lang]
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(WEB / lang, dest)
    for name in SHARED:
        source = WEB / name
        if source.is_dir():
            shutil.copytree(source, dest / name)
        else:
            shutil.copy2(source, dest / name)
    config = yaml.safe_load((WEB / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = words["title"]
    config["repository"]["path_to_book"] = words["path_to_book"]
    sphinx = config["sphinx"]["config"]
    sphinx["language"] = words["language"]
    sphinx["smartquotes"] = words["smartquotes"]
    sphinx["html_theme_options"]["search_bar_text"] = words["search"]
    sphinx["html_context"].update(
        other_lang=words["other"], other_lang_label=words["other_label"], other_lang_title=words["other_title"]
    )
    (dest / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    shutil.copy2(GLOSSARY, dest / "glossary.md")
    lessons = sorted((REPO / "notebooks" / lang).glob("[0-9][0-9]-*.ipynb"))
    if not lessons:
        raise SystemExit(f"site: no lessons in notebooks/{lang}/")
    for lesson in lessons:
        nb = with_static_widgets(json.loads(lesson.read_text(encoding="utf-8")), words["note"])
        (dest / lesson.name).write_text(json.dumps(nb, ensure_ascii=False, indent=1), encoding="utf-8")


def build(out: Path = OUT, quiet: bool = False) -> Path:
    """Build both books into ``out/html``; return that folder. Warnings of Sphinx fail the build."""
    site = out / "html"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    for lang in LANGUAGES:
        book = out / "src" / lang
        lay_out(lang, book)
        command = [JUPYTER_BOOK, "build", str(book), "--path-output", str(out / "books" / lang)]
        command += ["--all", "-W", "-n", "--keep-going"]
        if quiet:
            command.append("--quiet")
        subprocess.run(command, check=True)
        shutil.copytree(out / "books" / lang / "_build" / "html", site / lang)
    shutil.copy2(WEB / "index.html", site / "index.html")
    return site


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to build (default: {OUT.relative_to(REPO)})")
    parser.add_argument("--quiet", action="store_true", help="only Sphinx's warnings and errors")
    args = parser.parse_args(argv)
    try:
        site = build(args.out.resolve(), quiet=args.quiet)
    except subprocess.CalledProcessError as exc:
        print(f"site: the build failed ({exc.returncode}); Sphinx's messages are above", file=sys.stderr)
        return 1
    print(f"site: built {site}/index.html (English: {site}/en/index.html, Russian: {site}/ru/index.html)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
