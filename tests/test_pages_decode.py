"""Page decoding: charsets declared and detected in many scripts, the HTML prescan, Content-Type,
media types and skip reasons, and that decode_page never raises."""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.pages.decode import (
    DecodedPage,
    Skipped,
    codec_for_label,
    decode_page,
    parse_content_type,
    prescan_charset,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A few hundred characters of ordinary prose per language (written for these tests), enough for a
# detector to work on as it would on a real page.
SAMPLES = {
    "zh_hans": "互联网爬虫每天抓取数以亿计的网页，其中相当一部分内容是重复的。同一篇新闻报道常常被多个网"
    "站转载，只是页眉、页脚和广告有所不同。为了节省存储空间和带宽，搜索引擎需要在建立索引之前识别这些近"
    "似重复的页面。常用的方法是先提取正文，再计算指纹，例如局部敏感哈希。这样即使网页的导航栏发生了变化"
    "，正文相同的页面仍然会得到相近的指纹。本文介绍一种基于消息队列的去重系统，它可以在数据流中实时判断"
    "页面是否已经出现过。",
    "zh_hant": "網路爬蟲每天抓取數以億計的網頁，其中相當一部分內容是重複的。同一篇新聞報導常常被多個網站"
    "轉載，只是頁首、頁尾和廣告有所不同。為了節省儲存空間和頻寬，搜尋引擎需要在建立索引之前識別這些近似"
    "重複的頁面。常用的方法是先擷取正文，再計算指紋。這樣即使網頁的導覽列發生了變化，正文相同的頁面仍然"
    "會得到相近的指紋。本系統在資料流中即時判斷頁面是否已經出現過，並把結果寫回到下游的主題中，供其他服"
    "務使用。",
    "ja": "ウェブクローラーは毎日膨大な数のページを取得しますが、その多くは内容が重複しています。同じニ"
    "ュース記事が複数のサイトに転載され、ヘッダーやフッター、広告だけが異なることも珍しくありません。ス"
    "トレージと帯域幅を節約するために、検索エンジンは索引を作る前にこうした重複ページを見つけ出す必要が"
    "あります。一般的な方法は、まず本文を抽出し、次に指紋を計算することです。ナビゲーションが変わっても"
    "、本文が同じであれば似た指紋が得られます。このシステムは東京、大阪、京都の各拠点で運用されています"
    "。",
    "ko": "웹 크롤러는 매일 수많은 페이지를 가져오지만 그중 상당수는 내용이 중복됩니다. 같은 뉴스 기사가 "
    "여러 사이트에 다시 게재되고 머리글, 바닥글, 광고만 다른 경우도 흔합니다. 저장 공간과 대역폭을 아끼"
    "기 위해 검색 엔진은 색인을 만들기 전에 이러한 중복 페이지를 찾아내야 합니다. 일반적인 방법은 먼저 "
    "본문을 추출한 다음 지문을 계산하는 것입니다. 탐색 메뉴가 바뀌어도 본문이 같으면 비슷한 지문을 얻을 "
    "수 있습니다. 서울과 부산에서 운영 중입니다.",
    "ru": "Поисковые роботы ежедневно загружают огромное количество страниц, и значительная их часть пов"
    "торяет друг друга. Одна и та же новостная статья часто перепечатывается на нескольких сайтах, отлич"
    "аясь лишь шапкой, подвалом и рекламой. Чтобы сэкономить место на дисках и пропускную способность, п"
    "оисковой системе нужно находить такие почти одинаковые страницы ещё до построения индекса. Обычно с"
    "начала извлекают основной текст, а затем вычисляют его отпечаток.",
    "el": "Οι ανιχνευτές ιστού κατεβάζουν καθημερινά τεράστιο αριθμό σελίδων, και μεγάλο μέρος τους επαν"
    "αλαμβάνεται. Το ίδιο άρθρο ειδήσεων αναδημοσιεύεται συχνά σε πολλούς ιστότοπους, με διαφορετική μόν"
    "ο την κεφαλίδα, το υποσέλιδο και τις διαφημίσεις. Για να εξοικονομήσει χώρο αποθήκευσης και εύρος ζ"
    "ώνης, η μηχανή αναζήτησης πρέπει να εντοπίζει αυτές τις σχεδόν πανομοιότυπες σελίδες πριν από τη δη"
    "μιουργία του ευρετηρίου.",
    "cs": "Webové roboty každý den stahují obrovské množství stránek a značná část z nich se opakuje. Te"
    "ntýž zpravodajský článek bývá často převzat několika weby a liší se jen záhlavím, zápatím a reklamo"
    "u. Aby vyhledávač ušetřil místo na discích i přenosovou kapacitu, musí takové téměř shodné stránky "
    "rozpoznat ještě před sestavením indexu. Obvykle se nejprve vytáhne hlavní text a potom se spočítá j"
    "eho otisk. Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "pl": "Roboty internetowe codziennie pobierają ogromną liczbę stron, a znaczna ich część się powtarz"
    "a. Ten sam artykuł prasowy bywa przedrukowywany przez kilka serwisów i różni się jedynie nagłówkiem"
    ", stopką oraz reklamami. Aby zaoszczędzić miejsce na dyskach i przepustowość łącza, wyszukiwarka mu"
    "si wykrywać takie niemal identyczne strony jeszcze przed zbudowaniem indeksu. Zażółć gęślą jaźń, mó"
    "wią źli ludzie.",
    "tr": "Web tarayıcıları her gün çok sayıda sayfa indirir ve bunların önemli bir kısmı birbirinin tek"
    "rarıdır. Aynı haber yazısı çoğu zaman birkaç sitede yeniden yayımlanır; yalnızca üst bilgi, alt bil"
    "gi ve reklamlar farklıdır. Depolama alanından ve bant genişliğinden tasarruf etmek için arama motor"
    "unun bu neredeyse aynı sayfaları dizini oluşturmadan önce bulması gerekir. Pijamalı hasta yağız şof"
    "öre çabucak güvendi.",
    "de": "Webcrawler laden jeden Tag eine riesige Zahl von Seiten herunter, und ein großer Teil davon w"
    "iederholt sich. Derselbe Nachrichtenartikel wird häufig von mehreren Websites übernommen und unters"
    "cheidet sich nur durch Kopfzeile, Fußzeile und Werbung. Um Speicherplatz und Bandbreite zu sparen, "
    "muss eine Suchmaschine solche nahezu identischen Seiten erkennen, bevor sie den Index aufbaut. „Grö"
    "ßere Übungen“ kosten 12 € – oder mehr.",
    "fr": "Les robots d’indexation téléchargent chaque jour un nombre considérable de pages, dont une gr"
    "ande partie se répète. Le même article de presse est souvent repris par plusieurs sites et ne diffè"
    "re que par l’en-tête, le pied de page et les publicités. Pour économiser l’espace disque et la band"
    "e passante, le moteur de recherche doit repérer ces pages presque identiques avant de construire l’"
    "index. « Où êtes-vous allés ? »",
    "he": "סורקי רשת מורידים מדי יום מספר עצום של דפים, וחלק ניכר מהם חוזר על עצמו. אותה כתבה חדשותית מת"
    "פרסמת לעתים קרובות בכמה אתרים ונבדלת רק בכותרת העליונה, בכותרת התחתונה ובפרסומות. כדי לחסוך בשטח אח"
    "סון וברוחב פס, מנוע החיפוש צריך לזהות דפים כמעט זהים כאלה לפני בניית האינדקס. בדרך כלל מחלצים תחילה "
    "את הטקסט הראשי.",
    "ar": "تقوم برامج الزحف على الويب يوميا بتنزيل عدد هائل من الصفحات، وجزء كبير منها مكرر. كثيرا ما يع"
    "اد نشر المقال الإخباري نفسه في عدة مواقع، ولا يختلف إلا في الترويسة والتذييل والإعلانات. ولتوفير مس"
    "احة التخزين وعرض النطاق، يجب على محرك البحث أن يكتشف هذه الصفحات المتشابهة تقريبا قبل بناء الفهرس. "
    "يعمل النظام فوق طابور للرسائل.",
    "lt": "Interneto robotai kasdien atsisiunčia milžinišką puslapių skaičių, ir nemaža jų dalis kartoja"
    "si. Tas pats naujienų straipsnis dažnai perspausdinamas keliose svetainėse ir skiriasi tik antrašte"
    ", poraštėmis bei reklama. Kad sutaupytų vietos diskuose ir pralaidumo, paieškos sistema turi atpaži"
    "nti tokius beveik vienodus puslapius dar prieš sudarydama indeksą. Įžūlūs šuniukai čiaupė ąžuolą.",
    "ro": "Roboții de căutare descarcă zilnic un număr uriaș de pagini, iar o bună parte dintre ele se r"
    "epetă. Același articol de știri este adesea preluat de mai multe site-uri și diferă doar prin antet"
    ", subsol și reclame. Pentru a economisi spațiu de stocare și lățime de bandă, motorul de căutare tr"
    "ebuie să găsească aceste pagini aproape identice înainte de a construi indexul. Ștefan și Țuțu au î"
    "nțeles.",
    "vi": "Các trình thu thập web tải về một lượng trang khổng lồ mỗi ngày, và phần lớn trong số đó bị t"
    "rùng lặp. Cùng một bài báo thường được nhiều trang đăng lại, chỉ khác nhau ở phần đầu trang, chân t"
    "rang và quảng cáo. Để tiết kiệm dung lượng lưu trữ và băng thông, công cụ tìm kiếm cần phát hiện nh"
    "ững trang gần giống nhau này trước khi xây dựng chỉ mục.",
    "th": "โปรแกรมรวบรวมข้อมูลเว็บดาวน์โหลดหน้าเว็บจำนวนมหาศาลทุกวัน และหน้าเว็บจำนวนมากมีเนื้อหาซ้ำกัน บทความข่าวเดียวกัน"
    "มักถูกนำไปเผยแพร่ซ้ำในหลายเว็บไซต์ โดยต่างกันเพียงส่วนหัว ส่วนท้าย และโฆษณา เพื่อประหยัดพื้นที่จัดเก็บและแบนด์วิดท์ เครื่องมือค้"
    "นหาจำเป็นต้องตรวจหาหน้าที่เกือบเหมือนกันเหล่านี้ก่อนสร้างดัชนี",
}


class Case(NamedTuple):
    lang: str
    encoding: str  # the Python codec the page is written in
    label: str  # how a server or page declares it
    codec: str  # the codec decode_page must report for the declaration
    detectable: bool  # whether detection alone must recover the text (see docs/extraction.md)


CASES = [
    Case("zh_hans", "gb18030", "GB18030", "gb18030", True),
    Case("zh_hans", "gbk", "gbk", "gb18030", True),
    Case("zh_hans", "gb2312", "gb2312", "gb18030", True),
    Case("zh_hant", "big5", "big5", "big5hkscs", True),
    Case("ja", "shift_jis", "Shift_JIS", "cp932", True),
    Case("ja", "cp932", "windows-31j", "cp932", True),
    Case("ja", "euc_jp", "EUC-JP", "euc_jp", True),
    Case("ja", "iso2022_jp", "iso-2022-jp", "iso2022_jp", True),
    Case("ko", "euc_kr", "euc-kr", "cp949", True),
    Case("ko", "cp949", "ks_c_5601-1987", "cp949", True),
    Case("ru", "cp1251", "windows-1251", "cp1251", True),
    Case("ru", "koi8_r", "koi8-r", "koi8-r", True),
    Case("ru", "iso8859_5", "iso-8859-5", "iso8859-5", True),
    Case("el", "cp1253", "windows-1253", "cp1253", True),
    Case("el", "iso8859_7", "iso-8859-7", "iso8859-7", True),
    Case("cs", "cp1250", "windows-1250", "cp1250", True),
    Case("cs", "iso8859_2", "iso-8859-2", "iso8859-2", True),
    Case("pl", "iso8859_2", "latin2", "iso8859-2", True),
    Case("tr", "cp1254", "windows-1254", "cp1254", True),
    Case("tr", "iso8859_9", "iso-8859-9", "cp1254", True),
    Case("de", "cp1252", "ISO-8859-1", "cp1252", True),
    Case("fr", "cp1252", "windows-1252", "cp1252", True),
    Case("fr", "latin_1", "latin1", "cp1252", True),
    Case("de", "iso8859_15", "iso-8859-15", "iso8859-15", False),  # read as windows-1252: € is ¤
    Case("he", "cp1255", "windows-1255", "cp1255", True),
    Case("he", "iso8859_8", "iso-8859-8", "iso8859-8", True),
    Case("ar", "cp1256", "windows-1256", "cp1256", True),
    Case("ar", "iso8859_6", "iso-8859-6", "iso8859-6", True),
    Case("lt", "cp1257", "windows-1257", "cp1257", True),
    Case("lt", "iso8859_13", "iso-8859-13", "iso8859-13", True),
    Case("lt", "iso8859_4", "iso-8859-4", "iso8859-4", True),
    Case("ro", "iso8859_16", "iso-8859-16", "iso8859-16", True),
    Case("ro", "cp1250", "windows-1250", "cp1250", True),
    Case("vi", "cp1258", "windows-1258", "cp1258", True),
    Case("th", "cp874", "windows-874", "cp874", True),
    Case("th", "tis_620", "tis-620", "cp874", True),
    Case("ru", "utf-8", "utf-8", "utf-8", True),
    Case("ja", "utf-8", "UTF8", "utf-8", True),
]


def encodable(text: str, encoding: str) -> str:
    """``text`` as ``encoding`` can carry it: characters it lacks are decomposed (windows-1258
    writes Vietnamese tones as combining marks) or, failing that, dropped."""
    kept = []
    for char in text:
        for form in (char, unicodedata.normalize("NFC", unicodedata.normalize("NFD", char)[:2])
                     + unicodedata.normalize("NFD", char)[2:], unicodedata.normalize("NFD", char)):
            try:
                form.encode(encoding)
            except UnicodeEncodeError:
                continue
            kept.append(form)
            break
    return "".join(kept)


def html_page(text: str, head: str = "") -> str:
    return f"<!DOCTYPE html>\n<html><head>{head}<title>t</title></head><body><p>{text}</p></body></html>"


def _ids(case: Case) -> str:
    return f"{case.lang}-{case.encoding}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_charset_from_header(case: Case) -> None:
    text = html_page(encodable(SAMPLES[case.lang], case.encoding))
    page = decode_page(text.encode(case.encoding), f"text/html; charset={case.label}", {})
    assert page == DecodedPage(text, "html", case.codec, "header")


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_charset_from_meta(case: Case) -> None:
    text = html_page(encodable(SAMPLES[case.lang], case.encoding), f'<meta charset="{case.label}">')
    page = decode_page(text.encode(case.encoding), "text/html", {})
    assert page == DecodedPage(text, "html", case.codec, "meta")


@pytest.mark.parametrize("case", [c for c in CASES if c.detectable], ids=_ids)
@pytest.mark.parametrize("media", ["html", "text"])
def test_charset_detected(case: Case, media: str) -> None:
    sample = encodable(SAMPLES[case.lang], case.encoding)
    text = html_page(sample) if media == "html" else sample
    page = decode_page(text.encode(case.encoding), "text/html" if media == "html" else "text/plain", {})
    assert isinstance(page, DecodedPage)
    assert (page.text, page.media, page.charset_source) == (text, media, "detected")


@pytest.mark.parametrize("case", [c for c in CASES if not c.detectable], ids=_ids)
def test_charset_not_detectable_still_decodes(case: Case) -> None:
    """Detection may pick a sibling single-byte charset here; the page still decodes, in full."""
    text = html_page(encodable(SAMPLES[case.lang], case.encoding))
    page = decode_page(text.encode(case.encoding), "text/html", {})
    assert isinstance(page, DecodedPage) and page.charset_source == "detected"
    assert len(page.text) == len(text) and "\ufffd" not in page.text


@pytest.mark.parametrize(("bom", "encoding"), [
    (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"),
])
@pytest.mark.parametrize("content_type", ["text/html; charset=windows-1252", "text/plain", None])
def test_bom_wins(bom: bytes, encoding: str, content_type: str | None) -> None:
    text = html_page(SAMPLES["ko"], '<meta charset="iso-8859-2">')
    page = decode_page(bom + text.encode(encoding), content_type, {})
    media = "text" if content_type == "text/plain" else "html"
    assert page == DecodedPage(text, media, encoding, "bom")


class Fallback(NamedTuple):
    name: str
    body: bytes
    content_type: str
    text: str
    charset: str
    source: str


_RU = html_page(SAMPLES["ru"])
_JA = html_page(SAMPLES["ja"], '<meta charset="shift_jis">')
_UTF8 = html_page(SAMPLES["de"]).encode()
_CUT = ("<p>" + SAMPLES["ru"][:-1]).encode()[:-1]  # ends with the first byte of a two-byte "к"
FALLBACKS = [
    Fallback("wrong header, detection right", _RU.encode("cp1251"), "text/html; charset=utf-8", _RU,
             "cp1251", "detected"),
    Fallback("wrong header, meta right", _JA.encode("shift_jis"), "text/html; charset=utf-8", _JA, "cp932",
             "meta"),
    Fallback("unknown label ignored", _RU.encode("koi8_r"), "text/html; charset=x-no-such", _RU, "koi8-r",
             "detected"),
    Fallback("body cut inside a character", _CUT, "text/html; charset=utf-8", "<p>" + SAMPLES["ru"][:-2],
             "utf-8", "header"),
    Fallback("one bad byte: declared charset, replacement", _UTF8[:300] + b"\xff" + _UTF8[300:],
             "text/html; charset=utf-8", _UTF8[:300].decode() + "\ufffd" + _UTF8[300:].decode(), "utf-8",
             "header"),
    Fallback("no declaration, ASCII", b"<p>plain ascii page</p>", "text/html", "<p>plain ascii page</p>",
             "cp1252", "detected"),
    Fallback("meta after the first 1024 bytes is not read", (" " * 1100 + _JA).encode("shift_jis"),
             "text/html", " " * 1100 + _JA, "cp932", "detected"),
]


@pytest.mark.parametrize("case", FALLBACKS, ids=lambda c: c.name)
def test_charset_fallbacks(case: Fallback) -> None:
    assert decode_page(case.body, case.content_type, {}) == DecodedPage(case.text, "html", case.charset,
                                                                        case.source)


@pytest.mark.parametrize(("head", "codec"), [
    (b'<meta charset="shift_jis">', "cp932"),
    (b"<META CHARSET=GBK>", "gb18030"),
    (b"<meta charset = ' euc-kr '>", "cp949"),
    (b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">', "cp1251"),
    (b'<meta content="text/html; charset=\'koi8-r\'" http-equiv=content-type>', "koi8-r"),
    (b'<meta content="text/html; charset=koi8-r">', None),  # content without the pragma
    (b'<meta http-equiv="refresh" content="0; charset=koi8-r">', None),
    (b"<!-- <meta charset=big5> --><meta charset=euc-jp>", "euc_jp"),
    (b'<div title="<meta charset=big5>"><meta charset=euc-jp>', "euc_jp"),
    (b"<meta charset=no-such-thing><meta charset=iso-8859-7>", "iso8859-7"),
    (b"<meta charset=utf-16le>", "utf-8"),  # WHATWG: a prescanned UTF-16 is UTF-8
    (b"<meta charset=latin1 charset=big5>", "cp1252"),  # the first of a repeated attribute
    (b"<metal charset=big5>", None),
    (b"<?xml version='1.0' encoding='big5'?><meta charset=windows-1250>", "cp1250"),
    (b"<meta charset=big5", None),  # cut off: the prescan gives up
    (b"", None),
])
def test_prescan(head: bytes, codec: str | None) -> None:
    assert prescan_charset(head) == codec


@pytest.mark.parametrize(("label", "codec"), [
    ("utf-8", "utf-8"), (" UTF8 ", "utf-8"), ("unicode-1-1-utf-8", "utf-8"),
    ("gb2312", "gb18030"), ("GBK", "gb18030"), ("x-gbk", "gb18030"), ("gb18030", "gb18030"),
    ("big5", "big5hkscs"), ("big5-hkscs", "big5hkscs"), ("shift_jis", "cp932"), ("sjis", "cp932"),
    ("ms932", "cp932"), ("euc-kr", "cp949"), ("windows-949", "cp949"), ("euc-jp", "euc_jp"),
    ("iso-8859-1", "cp1252"), ("latin1", "cp1252"), ("ascii", "cp1252"), ("us-ascii", "cp1252"),
    ("iso-8859-9", "cp1254"), ("windows-874", "cp874"), ("iso-8859-2", "iso8859-2"), ("koi8-u", "koi8-u"),
    ("utf-16", "utf-16-le"), ("utf-16be", "utf-16-be"),
    ("utf-7", None), ("rot13", None), ("base64", None), ("x-no-such", None), ("", None),
])
def test_codec_for_label(label: str, codec: str | None) -> None:
    assert codec_for_label(label) == codec


@pytest.mark.parametrize(("value", "parsed"), [
    ("text/html", ("text/html", None)),
    ("Text/HTML; Charset=UTF-8", ("text/html", "UTF-8")),
    ('text/html;charset="Shift_JIS"', ("text/html", "Shift_JIS")),
    ('text/plain; format=flowed; charset="a\\"b"', ("text/plain", 'a"b')),
    ("text/html ; charset = utf-8", ("text/html", "utf-8")),  # spaces around "=" tolerated
    ("text/html; charset=", ("text/html", None)),
    ('text/html; title="a;b,c"; charset=big5', ("text/html", "big5")),
    ("text/html; charset=gbk, text/html", ("text/html", "gbk")),  # joined duplicates
    ("text/html; charset=gbk, text/plain", ("text/plain", None)),
    ("text/html, nonsense", ("text/html", None)),
    ("nonsense", None), ("text/", None), ("/html", None), ("text/ht ml", None), ("", None), (None, None),
])
def test_parse_content_type(value: str | None, parsed: tuple[str, str | None] | None) -> None:
    assert parse_content_type(value) == parsed


_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10"
_PROSE = "A short note in plain text, with no markup at all.\nSecond line.\n"


@pytest.mark.parametrize(("content_type", "body", "expected"), [
    ("text/html", b"<p>x</p>", "html"),
    ("application/xhtml+xml; charset=utf-8", b"<html xmlns='http://www.w3.org/1999/xhtml'/>", "html"),
    ("text/plain", _PROSE.encode(), "text"),
    ("text/markdown", b"# Title\n\nBody", "text"),
    ("text/plain", b"\x00\x01\x02binary\x03", Skipped("binary_body")),  # MIME Sniffing 7.2
    ("text/html", b"\x1f\x8b\x08\x00\x00\x00\x00\x00", Skipped("binary_body")),  # still gzipped
    ("text/html", _PNG, Skipped("binary_body")),
    ("image/png", _PNG, Skipped("content_type:image/png")),
    ("IMAGE/JPEG; q=1", b"\xff\xd8\xff\xe0", Skipped("content_type:image/jpeg")),
    ("application/pdf", b"%PDF-1.7", Skipped("content_type:application/pdf")),
    ("application/octet-stream", b"<p>x</p>", Skipped("content_type:application/octet-stream")),
    ("video/mp4", b"\x00\x00\x00\x18ftypmp42", Skipped("content_type:video/mp4")),
    ("audio/mpeg", b"ID3\x03", Skipped("content_type:audio/mpeg")),
    ("application/zip", b"PK\x03\x04", Skipped("content_type:application/zip")),
    ("text/css", b"p { color: red }", Skipped("content_type:text/css")),
    ("application/json", b'{"a": 1}', Skipped("content_type:application/json")),
    (None, b"<!DOCTYPE html><html><body>x</body></html>", "html"),
    (None, b"\n\t <html lang=en><p>x", "html"),
    (None, b"<p>just a paragraph</p>", "html"),
    (None, b"<?xml version='1.0'?>\n<html xmlns='http://www.w3.org/1999/xhtml'>", "html"),
    (None, b"<!-- generated --><head><title>x</title></head>", "html"),
    (None, _PROSE.encode(), "text"),
    (None, "Grüße aus Köln, schöne Stadt.".encode("cp1252"), "text"),
    (None, _PNG, Skipped("binary_body")),
    (None, b"%PDF-1.4\n%\xe2\xe3", Skipped("binary_body")),
    (None, b"\x00\x01\x02\x03 not text", Skipped("binary_body")),
    (None, b"RIFF$\x00\x00\x00WAVEfmt ", Skipped("binary_body")),
    (None, b"BMW sales rose in May.", "text"),  # "BM" is a bitmap only with binary bytes after it
    ("text/plain", b"ID3 tags, explained.", "text"),
    ("nonsense", b"<html><body>x</body></html>", "html"),  # unparsable: sniffed
    ("*/*", _PROSE.encode(), "text"),
    ("application/unknown", _PNG, Skipped("binary_body")),
    (None, b"", Skipped("empty_body")),
    ("text/html", b" \r\n\t ", Skipped("empty_body")),
    ("image/png", b"", Skipped("empty_body")),
])
def test_media(content_type: str | None, body: bytes, expected: str | Skipped) -> None:
    page = decode_page(body, content_type, {})
    assert (page.media if isinstance(page, DecodedPage) else page) == expected


def test_content_type_header_used_when_field_missing() -> None:
    assert decode_page(_PNG, None, {"content-type": "image/png"}) == Skipped("content_type:image/png")
    page = decode_page(b"<p>x</p>", "text/html", {"content-type": "image/png"})
    assert isinstance(page, DecodedPage) and page.media == "html"
    headers = {"content-type": "text/plain; charset=windows-1253"}
    page = decode_page("Καλημέρα".encode("cp1253"), None, headers)
    assert page == DecodedPage("Καλημέρα", "text", "cp1253", "header")


@pytest.mark.parametrize(("body", "content_type", "expected"), [
    ("<p>déjà vu</p>", "text/html; charset=iso-8859-1",
     DecodedPage("<p>déjà vu</p>", "html", "utf-8", "given")),
    ("Plain words.", None, DecodedPage("Plain words.", "text", "utf-8", "given")),
    ("<p>a\ud800b</p>", "text/html", DecodedPage("<p>a\ufffdb</p>", "html", "utf-8", "given")),
    ("<p>\ud83d\ude00</p>", "text/html", DecodedPage("<p>\U0001f600</p>", "html", "utf-8", "given")),
    ("   ", "text/html", Skipped("empty_body")),
    ("", None, Skipped("empty_body")),
    ("<p>x</p>", "image/gif", Skipped("content_type:image/gif")),
])
def test_text_given_by_the_fetcher(body: str, content_type: str | None,
                                   expected: DecodedPage | Skipped) -> None:
    assert decode_page(body, content_type, {}) == expected


_CONTENT_TYPES = st.one_of(
    st.none(), st.text(max_size=40),
    st.sampled_from(["text/html", "text/plain", "text/html; charset=utf-16", "text/html; charset=iso-2022-jp",
                     "text/plain; charset=gb18030", "application/xhtml+xml; charset=shift_jis", "image/png",
                     'text/html; charset="', "text/html, text/plain; charset=big5"]),
)
_HEADERS = st.dictionaries(st.sampled_from(["content-type", "content-encoding", "x-other"]),
                           st.text(max_size=30))


@PROPERTY
@given(body=st.one_of(st.binary(max_size=3000), st.text(max_size=2000)), content_type=_CONTENT_TYPES,
       headers=_HEADERS)
def test_decode_page_is_total(body: bytes | str, content_type: str | None, headers: dict[str, str]) -> None:
    page = decode_page(body, content_type, headers)
    if isinstance(page, Skipped):
        assert page.reason in {"empty_body", "binary_body"} or page.reason.startswith("content_type:")
    else:
        page.text.encode("utf-8")  # valid Unicode: no lone surrogates
        assert page.media in {"html", "text"}
        assert page.charset_source in {"given", "bom", "header", "meta", "detected", "default"}


@PROPERTY
@given(prefix=st.binary(max_size=1100), label=st.sampled_from(["big5", "koi8-r", "windows-1250", "utf-8"]))
def test_prescan_is_total(prefix: bytes, label: str) -> None:
    codec = prescan_charset(prefix + f"<meta charset={label}>".encode())
    assert codec is None or codec == codec_for_label(label)
