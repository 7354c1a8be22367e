"""Prose in 17 languages and the legacy charsets pages are written in: the charset cases of the
decoding tests (``tests/pages/test_pages_decode.py``) and of ``bench/extract_bench.py``'s detector
comparison.
"""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

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
