"""Moegirl (萌娘百科) through the MediaWiki API (``api.php``), never page HTML.

Seeds are categories (``list=categorymembers``, sub-categories to ``depth``) or page titles.
Each batch of pages gets ``prop=info|redirects`` (latest revision id, redirects to the page →
aliases), unchanged revisions are skipped (incremental), and changed pages are fetched with
``action=parse&prop=wikitext|categories|displaytitle``.  The infobox is parsed with
mwparserfromhell; display templates (黑幕, ruby, lang, jpn ...) are reduced to plain text.
Every request carries ``maxlag``; continuation tokens are followed.  The infobox image and the
page's sound files (``[[File:x.ogg]]``, audio templates: :func:`audio_files`) are fetched through
``Special:FilePath`` by the media pipelines (``crawlers.images``, ``crawlers.sounds``).

Arguments: ``start_urls`` (page or category URLs: ``https://zh.moegirl.org.cn/派蒙``,
``.../Category:原神角色``), ``categories``, ``titles``, ``api_url``, ``depth``, ``limit``, ``maxlag``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import mwparserfromhell
import scrapy
from scrapy.http import Response

from culturebase.entity import canonical_url
from crawlers.items import PageItem
from crawlers.middlewares import PAGE_KEY, REVID
from crawlers.sounds import MAX_PAGE_SOUNDS, is_audio_link
from crawlers.spiders.args import TITLES, as_list
from crawlers.text import clean_ws, one_line, split_list, truncate, wikitext_to_text

SITE = "moegirl"
DEFAULT_API = "https://zh.moegirl.org.cn/api.php"
DEFAULT_CATEGORIES = ("Category:网络流行语",)
CATEGORY_PREFIXES = ("category:", "分类:", "分類:", "cat:")
BATCH = 50

ALIAS_KEYS = ("别号", "別號", "别名", "昵称", "本名", "原名", "外文名", "英文名", "日文名", "中文名", "译名", "其他名称", "姓名")
WORK_KEYS = ("出处", "出處", "作品", "出身作品", "所属作品", "登场作品", "來源", "来源", "系列")
VISUAL_KEYS = ("发色", "髮色", "瞳色", "身高", "体重", "外貌", "服饰", "服裝", "萌点", "萌點", "形象", "标志")
TAG_KEYS = ("声优", "聲優", "配音", "出身地区", "出身地", "所属团体", "所屬團體", "所属", "种族", "職業", "职业", "国籍")
INFOBOX_KEYS = set(ALIAS_KEYS + WORK_KEYS + VISUAL_KEYS + TAG_KEYS + ("生日", "年龄", "性别", "血型", "相关人士", "image", "图片"))
USAGE_HEADINGS = re.compile(r"梗|名言|名句|经典台词|經典台詞|台词|语录|語錄|流行|衍生|二次创作|二创|网络|迷因|meme|用法|出处与用法", re.I)
VISUAL_HEADINGS = re.compile(r"外貌|外观|外觀|形象|造型|人物形象|角色形象")


def strip_html(text: str) -> str:
    return one_line(re.sub(r"<[^>]+>", "", text or ""))


def find_infobox(code: Any) -> tuple[Any, dict[str, str]]:
    """The template with the most known infobox parameters, and its parameters as wikitext."""
    best, best_hits = None, 0
    for tpl in code.filter_templates(recursive=False):
        keys = {one_line(str(p.name)) for p in tpl.params}
        hits = len(keys & INFOBOX_KEYS)
        if hits > best_hits:
            best, best_hits = tpl, hits
    if best is None:
        return None, {}
    return best, {one_line(str(p.name)): str(p.value).strip() for p in best.params if p.showkey}


def _param_text(value: str) -> str:
    return wikitext_to_text(value.replace("<br>", "\n").replace("<br/>", "\n").replace("<br />", "\n"))


def _section_of(code: Any, heading_node: Any) -> str:
    """The wikitext of the section a heading opens (its subsections included)."""
    for section in code.get_sections(levels=[heading_node.level], include_headings=True):
        first = section.filter_headings(recursive=False)
        if first and first[0] is heading_node or (first and str(first[0]) == str(heading_node)):
            return str(section)
    return str(heading_node)


_FILE_PREFIX = re.compile(r"^(?:file|image|media|文件|檔案|图像|圖像|媒体|媒體)\s*:\s*", re.I)


def audio_files(code: Any) -> list[str]:
    """Sound files a page embeds: ``[[File:x.ogg]]`` / ``[[文件:x.mp3]]`` / ``[[Media:x.ogg]]`` links, and a
    template parameter that is an audio file name (``{{Audio|x.ogg}}``, ``{{音频|file=文件:x.mp3}}``)."""
    names: list[str] = []
    for link in code.filter_wikilinks():
        target = one_line(str(link.title))
        if _FILE_PREFIX.match(target):
            names.append(_FILE_PREFIX.sub("", target))
    for tpl in code.filter_templates():
        for param in tpl.params:
            value = one_line(str(param.value))
            if "[[" not in value and "{" not in value and "|" not in value:
                names.append(_FILE_PREFIX.sub("", value))
    out = [n.replace("_", " ").strip() for n in names if is_audio_link("/" + n.strip()) and "/" not in n]
    return list(dict.fromkeys(out))[:MAX_PAGE_SOUNDS]


def parse_wikitext(title: str, displaytitle: str, wikitext: str, categories: list[str], redirects: list[str]) -> dict[str, Any]:
    """The entity fields of a Moegirl page from its wikitext (pure: tested on saved API responses)."""
    code = mwparserfromhell.parse(wikitext)
    _, params = find_infobox(code)
    name = strip_html(displaytitle) or title
    aliases: list[str] = []
    if title != name:
        aliases.append(title)
    for key in ALIAS_KEYS:
        if params.get(key):
            aliases.extend(split_list(_param_text(params[key])))
    aliases.extend(redirects)
    source_work = ""
    for key in WORK_KEYS:
        if params.get(key):
            works = split_list(_param_text(params[key]))
            if works:
                source_work = works[0]
                break
    visual_parts = []
    for key in VISUAL_KEYS:
        if params.get(key):
            value = "、".join(p.strip() for p in _param_text(params[key]).split("\n") if p.strip())
            if value:
                visual_parts.append(f"{key}：{value}")
    tags = [c for c in categories if c]
    for key in TAG_KEYS:
        if params.get(key):
            for value in split_list(_param_text(params[key])):
                tags.append(f"{key}:{value}")
    sections = code.get_sections(include_lead=True, flat=True)
    lead = ""
    usage_parts: list[str] = []
    if sections and not sections[0].filter_headings(recursive=False):
        lead = wikitext_to_text(sections[0])
    skip_below: int | None = None
    for heading_node in code.filter_headings(recursive=False):
        level = heading_node.level
        if skip_below is not None and level > skip_below:
            continue  # inside a section already taken whole
        skip_below = None
        heading = one_line(wikitext_to_text(heading_node.title))
        is_usage, is_visual = bool(USAGE_HEADINGS.search(heading)), bool(VISUAL_HEADINGS.search(heading))
        if not (is_usage or is_visual):
            continue
        section = _section_of(code, heading_node)
        body = wikitext_to_text(mwparserfromhell.parse(section[len(str(heading_node)) :]), keep_headings=True)
        if not body:
            continue
        skip_below = level
        if is_usage:
            usage_parts.append(f"{heading}：{body}")
        else:
            visual_parts.append(truncate(body, 1500))
    # the lead: first paragraphs of prose (infobox and navigation templates are already gone)
    description = truncate(clean_ws(lead), 3000)
    page_text = wikitext_to_text(code, keep_headings=True)
    return {
        "name": name,
        "aliases": [a for a in dict.fromkeys(aliases) if a and a != name],
        "source_work": source_work.strip("《》「」"),
        "description": description,
        "visual_desc": truncate("；".join(visual_parts), 4000),
        "cultural_usage": truncate("\n".join(usage_parts), 6000),
        "tags": tags,
        "page_text": f"{name}\n{page_text}",
        "infobox": {k: _param_text(v) for k, v in params.items()},
        "audio_files": audio_files(code),
    }


class MoegirlSpider(scrapy.Spider):
    """Moegirl pages through the MediaWiki API."""

    name = "moegirl"
    custom_settings: dict[str, Any] = {}

    def __init__(
        self,
        start_urls: Any = None,
        categories: Any = None,
        titles: Any = None,
        api_url: str | None = None,
        depth: Any = 1,
        limit: Any = None,
        maxlag: Any = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.categories = as_list(categories, TITLES)
        self.titles = as_list(titles, TITLES)
        self.api_url = api_url
        for url in as_list(start_urls, TITLES):
            self._add_start_url(url)
        self.api_url = self.api_url or DEFAULT_API
        if not self.categories and not self.titles:
            self.categories = list(DEFAULT_CATEGORIES)
        self.depth = int(depth)
        self.limit = int(limit) if limit not in (None, "", 0, "0") else None
        self.maxlag = int(maxlag)
        self.pages_scheduled = 0
        self._seen_pages: set[int] = set()
        self._seen_categories: set[str] = set()
        split = urlsplit(self.api_url)
        self.page_base = f"{split.scheme}://{split.netloc}{split.path.rsplit('/', 1)[0]}/"

    def _add_start_url(self, url: str) -> None:
        parts = urlsplit(url)
        if not self.api_url:
            self.api_url = f"{parts.scheme}://{parts.netloc}/api.php"
        if parts.path.endswith("api.php"):
            query = parse_qs(parts.query)
            if "cmtitle" in query:
                self.categories.append(query["cmtitle"][0])
            if "titles" in query:
                self.titles.extend(query["titles"][0].split("|"))
            self.api_url = f"{parts.scheme}://{parts.netloc}{parts.path}"
            return
        title = parse_qs(parts.query).get("title", [None])[0] or unquote(parts.path.lstrip("/"))
        title = title.replace("_", " ")
        if title.casefold().startswith(CATEGORY_PREFIXES):
            self.categories.append(title)
        elif title:
            self.titles.append(title)

    # -- API requests -----------------------------------------------------------------------
    def api(self, callback: Any, params: dict[str, Any], meta: dict[str, Any] | None = None, **kw: Any) -> scrapy.Request:
        query = {"format": "json", "formatversion": "2", "maxlag": str(self.maxlag), **params}
        return scrapy.Request(f"{self.api_url}?{urlencode(query)}", callback=callback, meta=meta or {}, **kw)

    def page_url(self, title: str) -> str:
        return self.page_base + quote(title.replace(" ", "_"), safe="/:()!,'*~")

    @staticmethod
    def _category_title(name: str) -> str:
        head, _, rest = name.partition(":")
        return f"Category:{rest}" if rest and head.casefold() + ":" in CATEGORY_PREFIXES else f"Category:{name}"

    async def start(self) -> AsyncIterator[Any]:
        for cat in self.categories:
            yield self.members_request(self._category_title(cat), 0)
        for start in range(0, len(self.titles), BATCH):
            chunk = self.titles[start : start + BATCH]
            yield self.api(self.parse_info, self._info_params(titles="|".join(chunk)), dont_filter=True)

    def members_request(self, category: str, depth: int, cont: dict[str, str] | None = None) -> scrapy.Request:
        params = {
            "action": "query",
            "list": "categorymembers",
            "cmtitle": category,
            "cmtype": "page|subcat",
            "cmnamespace": "0|14",
            "cmlimit": str(BATCH),
            **(cont or {}),
        }
        return self.api(self.parse_members, params, meta={"category": category, "cat_depth": depth}, dont_filter=True)

    @staticmethod
    def _info_params(**extra: str) -> dict[str, str]:
        return {"action": "query", "prop": "info|redirects", "rdprop": "title", "rdnamespace": "0", "rdlimit": "max", "redirects": "1", **extra}

    def _api_error(self, response: Response, fatal: bool = True) -> dict[str, Any] | None:
        """The decoded API reply, or None after counting its error (``fatal``: an error, else a dropped page)."""
        try:
            data = json.loads(response.text)
        except (ValueError, AttributeError):
            data = {"error": {"code": "not json", "info": "the reply is not JSON"}}
        if "error" in data:
            code = data["error"].get("code", "unknown")
            response.meta["api_error"] = code
            self.crawler.stats.inc_value(f"kar/api_errors/{code}")
            if fatal:
                self.crawler.stats.inc_value("kar/errors")
            self.logger.log(40 if fatal else 30, "API error %s at %s: %s", code, response.url, data["error"].get("info"))
            return None
        for warning in (data.get("warnings") or {}).values():
            self.logger.warning("API warning at %s: %s", response.url, warning)
        return data

    def limit_reached(self) -> bool:
        return self.limit is not None and self.pages_scheduled >= self.limit

    # -- callbacks ------------------------------------------------------------------------
    def parse_members(self, response: Response) -> Iterator[Any]:
        data = self._api_error(response)
        if data is None:
            return
        depth = response.meta["cat_depth"]
        pageids = []
        for m in data.get("query", {}).get("categorymembers", []):
            if m.get("ns") == 14:
                if depth < self.depth and m["title"] not in self._seen_categories:
                    self._seen_categories.add(m["title"])
                    yield self.members_request(m["title"], depth + 1)
            elif m.get("ns") == 0 and m.get("pageid") not in self._seen_pages:
                pageids.append(str(m["pageid"]))
        for start in range(0, len(pageids), BATCH):
            yield self.api(self.parse_info, self._info_params(pageids="|".join(pageids[start : start + BATCH])), dont_filter=True)
        if "continue" in data and not self.limit_reached():
            cont = {k: str(v) for k, v in data["continue"].items()}
            yield self.members_request(response.meta["category"], depth, cont)

    def parse_info(self, response: Response) -> Iterator[Any]:
        """Latest revisions and redirects of a batch of pages (following ``rdcontinue``), then parse requests."""
        data = self._api_error(response)
        if data is None:
            return
        acc: dict[int, dict[str, Any]] = response.meta.get("acc") or {}
        query = data.get("query", {})
        normalized = {r["to"]: r["from"] for r in query.get("normalized", [])}
        title_redirects: dict[str, list[str]] = {}
        for r in query.get("redirects", []):  # a seed title that is itself a redirect
            title_redirects.setdefault(r["to"], []).append(normalized.get(r["from"], r["from"]))
        for page in query.get("pages", []):
            if page.get("missing") or page.get("invalid") or "pageid" not in page:
                self.crawler.stats.inc_value("kar/dropped/missing page")
                continue
            entry = acc.setdefault(
                page["pageid"], {"title": page["title"], "lastrevid": page.get("lastrevid"), "redirects": []}
            )
            entry["lastrevid"] = page.get("lastrevid") or entry["lastrevid"]
            entry["redirects"].extend(r["title"] for r in page.get("redirects", []))
            entry["redirects"].extend(title_redirects.get(page["title"], []))
        if "continue" in data and not data.get("batchcomplete"):
            cont = {k: str(v) for k, v in data["continue"].items()}
            params = {k: v[0] for k, v in parse_qs(urlsplit(response.url).query).items()}
            params.update(cont)
            yield scrapy.Request(
                f"{self.api_url}?{urlencode(params)}", callback=self.parse_info, meta={"acc": acc}, dont_filter=True
            )
            return
        for pageid, entry in acc.items():
            if pageid in self._seen_pages or self.limit_reached():
                continue
            self._seen_pages.add(pageid)
            self.pages_scheduled += 1
            params = {"action": "parse", "pageid": str(pageid), "prop": "wikitext|categories|displaytitle", "redirects": "1"}
            meta = {
                PAGE_KEY: canonical_url(self.page_url(entry["title"])),
                REVID: entry["lastrevid"],
                "redirects": list(dict.fromkeys(entry["redirects"])),
                "title": entry["title"],
            }
            yield self.api(self.parse_page, params, meta=meta, priority=10)

    def parse_page(self, response: Response) -> Iterator[PageItem]:
        data = self._api_error(response, fatal=False)
        key = response.meta.get(PAGE_KEY)
        if data is None:
            # an API error for one page: dropped with its reason, the crawl goes on
            yield PageItem(
                site=SITE,
                url=self.page_url(response.meta.get("title", "")),
                page_key=key,
                drop_reason=f"api error {response.meta.get('api_error')}",
            )
            return
        parse = data.get("parse") or {}
        title = parse.get("title") or response.meta.get("title", "")
        wikitext = parse.get("wikitext")
        if isinstance(wikitext, dict):  # formatversion=1 shape
            wikitext = wikitext.get("*", "")
        displaytitle = parse.get("displaytitle") or title
        categories = [
            (c.get("category") or c.get("*") or "").replace("_", " ")
            for c in parse.get("categories", [])
            if not c.get("hidden")
        ]
        redirects = list(response.meta.get("redirects") or [])
        redirects += [r["from"] for r in parse.get("redirects", []) if r.get("from")]
        fields = parse_wikitext(title, displaytitle, wikitext or "", categories, redirects)
        yield PageItem(
            site=SITE,
            url=self.page_url(title),
            page_key=key or canonical_url(self.page_url(title)),
            name=fields["name"],
            aliases=fields["aliases"],
            source_work=fields["source_work"],
            description=fields["description"],
            visual_desc=fields["visual_desc"],
            cultural_usage=fields["cultural_usage"],
            language="zh",
            tags=fields["tags"],
            title=title,
            page_text=fields["page_text"],
            details=fields["infobox"],
            revid=parse.get("revid") or response.meta.get(REVID),
            image_urls=self.infobox_image_urls(fields["infobox"]),
            audio_urls=[self.page_url(f"Special:FilePath/{name}") for name in fields["audio_files"]],
        )

    def infobox_image_urls(self, infobox: dict[str, str]) -> list[str]:
        """The infobox image (``|image=`` / ``|图片=``) as a ``Special:FilePath`` URL (MediaWiki redirects it to the file)."""
        for key in ("image", "图片"):
            name = (infobox.get(key) or "").strip()
            name = re.sub(r"^(?:file|image|文件|檔案|图像):", "", name, flags=re.I).strip()
            if name and re.search(r"\.(?:png|jpe?g|gif|webp)$", name, re.I) and "{" not in name:
                return [self.page_url(f"Special:FilePath/{name}")]
        return []
