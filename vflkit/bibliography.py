"""The papers vflkit reproduces and the baselines it implements from other papers: one entry each,
with where a reader opens it.

The project's one bibliography, keyed by BibTeX keys (a study names its entry, ``Study.cites``):
the README, the report, each notebook's first cell, ``CITATION.cff`` and the book's references
take their titles, authors and links from here. Python, not BibTeX, so its writers need no
parser and an unknown name lists the known ones; :func:`bibtex` writes it out.

A link is the paper's DOI where one was confirmed, else its arXiv entry, else a public page of the
published version (see each entry's ``note``). VFedMH and EASTER share one arXiv entry: VFedMH's
numbers are those of its second version, EASTER's (the journal extension) of its third.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["Paper", "PAPERS", "get", "link", "citation", "notebook_line", "bibtex"]


@dataclass(frozen=True)
class Paper:
    """One paper: its bibliographic data and the link a reader follows."""

    key: str  # vflkit's name for it: a study module's name, or a baseline method's
    short: str  # as vflkit's tables and headings name it
    title: str
    authors: tuple[str, ...]
    venue: str  # where it appeared, as a reader would look it up
    year: int
    url: str  # the DOI, arXiv or publisher page a reader opens
    doi: str = ""
    arxiv: str = ""  # with its version where the numbers vflkit compares come from one
    note: str = ""  # what the link is, where it is not a DOI

    @property
    def link_text(self) -> str:
        """What the link is called: ``doi:…``, ``arXiv:…`` or the site's name."""
        return f"doi:{self.doi}" if self.doi else f"arXiv:{self.arxiv}" if self.arxiv else "publication page"


PAPERS: dict[str, Paper] = {p.key: p for p in (
    # the five papers, in the report's order
    Paper("wang2023vfedmh", "VFedMH",
          "VFedMH: Vertical Federated Learning for Training Multiple Heterogeneous Models",
          ("Shuo Wang", "Keke Gai", "Jing Yu", "Liehuang Zhu", "Kim-Kwang Raymond Choo", "Bin Xiao"),
          "arXiv preprint", 2023, "https://arxiv.org/abs/2310.13367v2", arxiv="2310.13367v2"),
    Paper("wang2025easter", "EASTER",
          "EASTER: Embedding Aggregation-based Heterogeneous Models Training in Vertical Federated Learning",
          ("Shuo Wang", "Keke Gai", "Jing Yu", "Liehuang Zhu", "Weizhi Meng", "Bin Xiao"),
          "IEEE Transactions on Mobile Computing 24(12), 12903-12917", 2025,
          "https://arxiv.org/abs/2310.13367v3", arxiv="2310.13367v3",
          note="the journal version's DOI is not confirmed here; the link is its arXiv version"),
    Paper("mugunthan2021multivfl", "Multi-VFL",
          "Multi-VFL: A Vertical Federated Learning System for Multiple Data and Label Owners",
          ("Vaikkunth Mugunthan", "Pawan Goyal", "Lalana Kagal"),
          "arXiv preprint", 2021, "https://arxiv.org/abs/2106.05468", arxiv="2106.05468"),
    Paper("irureta2024apcvfl", "APC-VFL",
          "Towards Active Participant Centric Vertical Federated Learning: Some Representations May Be All You Need",
          ("Jon Irureta", "Jon Imaz", "Aizea Lojo", "Javier Fernandez-Marques", "Iñigo Perona", "Marco González"),
          "arXiv preprint", 2024, "https://arxiv.org/abs/2410.17648", arxiv="2410.17648"),
    Paper("li2024adptvfedconv", "AdptVFedConv",
          "Adaptive Vertical Federated Learning via Feature Map Transferring in Mobile Edge Computing",
          ("Yuanzhang Li", "Tianchi Sha", "Thar Baker", "Xiao Yu", "Zhiwei Shi", "Sikang Hu"),
          "Computing (Springer) 106(4), 1081-1097", 2024,
          "https://research.brighton.ac.uk/en/publications/adaptive-vertical-federated-learning-via-feature-map-transferring",
          note="publication page (University of Brighton); its DOI is not confirmed here"),
    # the baselines the papers compare with, implemented in vflkit/methods/
    Paper("castiglia2022cvfl", "C-VFL",
          "Compressed-VFL: Communication-Efficient Learning with Vertically Partitioned Data",
          ("Timothy Castiglia", "Anirban Das", "Shiqiang Wang", "Stacy Patterson"),
          "ICML 2022 (PMLR 162)", 2022, "https://arxiv.org/abs/2206.08330", arxiv="2206.08330"),
    Paper("romanini2021pyvertical", "PyVertical",
          "PyVertical: A Vertical Federated Learning Framework for Multi-headed SplitNN",
          ("Daniele Romanini", "Adam James Hall", "Pavlos Papadopoulos", "Tom Titcombe", "Abbas Ismail",
           "Tudor Cebere", "Robert Sandmann", "Robin Roehm", "Michael A. Hoeh"),
          "arXiv preprint", 2021, "https://arxiv.org/abs/2104.00489", arxiv="2104.00489"),
    Paper("huang2023vfedtrans", "VFedTrans",
          "Vertical Federated Knowledge Transfer via Representation Distillation for Healthcare Collaboration Networks",
          ("Chung-ju Huang", "Leye Wang", "Xiao Han"),
          "arXiv preprint", 2023, "https://arxiv.org/abs/2302.05675", arxiv="2302.05675"),
    Paper("chai2022fedsvd", "FedSVD",
          "Practical Lossless Federated Singular Vector Decomposition over Billion-Scale Data",
          ("Di Chai", "Leye Wang", "Junxue Zhang", "Liu Yang", "Shuowei Cai", "Kai Chen", "Qiang Yang"),
          "KDD 2022", 2022, "https://doi.org/10.1145/3534678.3539402", doi="10.1145/3534678.3539402",
          arxiv="2105.08925"),
)}


def get(key: str) -> Paper:
    """The entry of ``key`` (its BibTeX key, such as a study's ``cites``)."""
    try:
        return PAPERS[key]
    except KeyError:
        raise ConfigError(f"no paper {key!r} in vflkit.bibliography; choose one of {', '.join(PAPERS)}") from None


def _authors(paper: Paper) -> str:
    names = list(paper.authors)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def link(key: str) -> str:
    """A markdown link to the paper: ``[arXiv:2310.13367v2](https://arxiv.org/abs/2310.13367v2)``."""
    paper = get(key)
    return f"[{paper.link_text}]({paper.url})"


def citation(key: str) -> str:
    """The paper in one markdown line: authors, *title*, venue, year, and its link."""
    paper = get(key)
    return f"{_authors(paper)}, *{paper.title}*, {paper.venue}, {paper.year}: {link(key)}"


def notebook_line(key: str) -> str:
    """The line each notebook's first cell carries under its title (tests check it verbatim)."""
    return f"**Paper:** {citation(key)}."


def bibtex() -> str:
    """Every entry as BibTeX, for a reference manager."""
    out = []
    for p in PAPERS.values():
        kind = "inproceedings" if p.venue.startswith(("ICML", "KDD")) else "article"
        where = "booktitle" if kind == "inproceedings" else "journal"
        fields = {"title": p.title, "author": " and ".join(p.authors), where: p.venue, "year": str(p.year),
                  "url": p.url}
        if p.doi:
            fields["doi"] = p.doi
        if p.arxiv:
            fields["eprint"], fields["archivePrefix"] = p.arxiv, "arXiv"
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields.items())
        out.append(f"@{kind}{{{p.key},\n{body}\n}}\n")
    return "\n".join(out)
