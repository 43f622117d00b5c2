"""Write the packaged corpus and questions of the ``search_qa`` recipe (deterministic, seeded).

The corpus describes a consistent fictional world (so that no model knows the answers by
heart): countries, cities on rivers, people (born in a city, a profession, some with a
teacher), companies (a founder, a headquarters), landmarks (built by a company, in a city) and
events (held in a city, organized by a person). Every name is made of invented syllables and is
unique, so one search for a name finds its document. Each entity gets one short
encyclopedia-like document that states its own facts first.

Questions need two or three hops: each hop searches one name and reads the next name (or the
answer) from that name's document, e.g. "In which city was the founder of the company that
built the Vell Bridge born?" = landmark -> company -> founder -> city. Each question row keeps
its ``hops`` (query, document, what the document gives) and ``supporting_docs``.

Writes ``agentfly_cli/recipes/data/search_qa_corpus.jsonl`` (``id``, ``title``, ``text``) and
``agentfly_cli/recipes/data/search_qa.jsonl`` (``id``, ``question``, ``answer``, ``type``,
``hops``, ``supporting_docs``). Run: python scripts/make_search_qa_data.py
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "agentfly_cli" / "recipes" / "data"
SEED = 20240917
QUESTIONS_PER_TYPE = 110
# The world's size: about 970 questions, so that the recipe's 10% held out (97) can measure a
# gain of 0.1 in held-out reward (with 25, as the first world had, its standard error was 0.11).
PEOPLE, FIRST_NAMES, FOUNDERS, LANDMARK_COUNT, EVENT_COUNT = 336, 100, 120, 216, 144

ONSETS = "b br c d dr f g gr h k l m n p r s st t th v w z".split()
VOWELS = "a e i o u a e o".split()
CODAS = ["", "", "n", "r", "l", "s", "th", "nd", "rk", "sk", "ll", "v", "m", "x"]
PROFESSIONS = [
    "engineer", "architect", "painter", "merchant", "physician", "poet", "astronomer",
    "shipwright", "composer", "botanist", "cartographer", "printer",
]  # fmt: skip
INDUSTRIES = {
    "Works": "engineering",
    "Ironworks": "iron",
    "Shipyards": "shipbuilding",
    "Glassworks": "glassmaking",
    "Mills": "textile",
    "Masonry": "stonework",
}
LANDMARKS = {
    "Bridge": ("bridge", ["It has {n} arches and carries a road and a footpath.",
                          "A toll was charged to cross it until the old gate was removed."]),
    "Tower": ("tower", ["It is {n}0 metres tall and has a clock near the top.",
                        "Visitors can climb its spiral stairs on holidays."]),
    "Dam": ("dam", ["It holds back a lake used for drinking water.",
                    "Its {n} sluice gates are opened every spring."]),
    "Lighthouse": ("lighthouse", ["Its lamp can be seen from {n}0 kilometres at sea.",
                                  "It was painted with red and white bands."]),
    "Observatory": ("observatory", ["Its largest telescope has a mirror of {n} feet.",
                                    "Its dome turns on {n} iron wheels."]),
    "Hall": ("concert hall", ["It seats {n} hundred people.",
                              "Its organ was restored after a fire."]),
}  # fmt: skip
EVENTS = {
    "Festival": "a music festival",
    "Fair": "a trade fair",
    "Regatta": "a rowing regatta",
    "Congress": "a scientific congress",
    "Exhibition": "an art exhibition",
}
MATERIALS = ["stone", "iron", "brick", "steel", "granite", "timber"]
TRAITS = [
    "its salt markets", "its clockmakers", "its old university", "its blue glass",
    "its harbour", "its spring horse fair", "its bell foundry", "its paper mills",
    "its covered markets", "its botanical garden", "its lace", "its cheese",
]  # fmt: skip
CURRENCIES = ["crown", "mark", "florin", "thaler", "ducat", "shilling"]
FILLER_PERSON = [
    "{Pronoun} kept detailed notebooks that survive in a city archive.",
    "A street is named after {object}.",
    "{Pronoun} was known for long walks before dawn.",
    "A portrait of {object} hangs in a provincial museum.",
]
FILLER_COMPANY = [
    "At its height it employed {n} hundred workers.",
    "Its emblem is a hammer crossed with a key.",
    "It was one of the first firms to offer workers a pension.",
]
FILLER_EVENT = [
    "About {n} thousand visitors attended.",
    "It ended with fireworks over the water.",
    "Its programme was printed in three languages.",
]
# Names must not collide with ordinary English words that the documents use.
RESERVED = set(
    "also been born built city from held into later more most over same than that them then "
    "they this were when with wide hall fair mill mills tower works dam bold told lake sale "
    "tale male pale gate late mark crown none note".split()
)


class Namer:
    """Invented names, unique as lowercase words across the whole world."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set(RESERVED)

    def syllable(self, coda: bool) -> str:
        text = self.rng.choice(ONSETS) + self.rng.choice(VOWELS)
        return text + (self.rng.choice(CODAS) if coda else "")

    def new(self, syllables: tuple[int, ...] = (1, 2, 2)) -> str:
        while True:
            count = self.rng.choice(syllables)
            word = "".join(self.syllable(i == count - 1) for i in range(count))
            if len(word) >= 4 and word not in self.used:
                self.used.add(word)
                return word.capitalize()


@dataclass
class World:
    countries: list[dict] = field(default_factory=list)
    cities: list[dict] = field(default_factory=list)
    people: list[dict] = field(default_factory=list)
    companies: list[dict] = field(default_factory=list)
    landmarks: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)


def slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def build_world(rng: random.Random) -> World:
    namer = Namer(rng)
    world = World()
    rivers = [namer.new((2,)) for _ in range(10)]
    for i in range(6):
        world.countries.append(
            {"name": namer.new((2, 3)), "currency": CURRENCIES[i], "id": None, "cities": []}
        )
    for country in world.countries:
        for _ in range(4):
            city = {
                "name": namer.new(),
                "country": country["name"],
                "river": rng.choice(rivers),
                "founded": rng.randint(900, 1500),
                "trait": rng.choice(TRAITS),
            }
            world.cities.append(city)
            country["cities"].append(city["name"])
        country["capital"] = country["cities"][0]
    for i, country in enumerate(world.countries):
        country["neighbor"] = world.countries[(i + 1) % len(world.countries)]["name"]
    firsts = [namer.new((2,)) for _ in range(FIRST_NAMES)]
    for _ in range(PEOPLE):
        born = rng.randint(1760, 1880)
        person = {
            "name": f"{rng.choice(firsts)} {namer.new((2,))}",
            "born": born,
            "died": born + rng.randint(40, 85),
            "city": rng.choice(world.cities)["name"],
            "profession": rng.choice(PROFESSIONS),
            "pronoun": rng.choice(["she", "he"]),
            "mentor": None,
            "moved": None,
        }
        if rng.random() < 0.5:
            person["moved"] = rng.choice([c for c in world.cities if c["name"] != person["city"]])[
                "name"
            ]
        world.people.append(person)
    for person in world.people:
        teachers = [p for p in world.people if 15 <= person["born"] - p["born"] <= 40]
        if teachers and rng.random() < 0.75:
            person["mentor"] = rng.choice(teachers)["name"]
    founders = rng.sample(world.people, FOUNDERS)
    for founder in founders:
        suffix = rng.choice(list(INDUSTRIES))
        company = {
            "name": f"{namer.new()} {suffix}",
            "industry": INDUSTRIES[suffix],
            "founder": founder["name"],
            "founded": founder["born"] + rng.randint(25, 40),
            "hq": rng.choice(world.cities)["name"],
            "branch": None,
        }
        if rng.random() < 0.5:
            company["branch"] = rng.choice([c for c in world.cities if c["name"] != company["hq"]])[
                "name"
            ]
        world.companies.append(company)
    for _ in range(LANDMARK_COUNT):
        kind = rng.choice(list(LANDMARKS))
        company = rng.choice(world.companies)
        world.landmarks.append(
            {
                "name": f"{namer.new()} {kind}",
                "kind": kind,
                "material": rng.choice(MATERIALS),
                "city": rng.choice(world.cities)["name"],
                "builder": company["name"],
                "year": company["founded"] + rng.randint(3, 60),
                "n": rng.randint(3, 9),
            }
        )
    for _ in range(EVENT_COUNT):
        kind = rng.choice(list(EVENTS))
        organizer = rng.choice(world.people)
        world.events.append(
            {
                "name": f"{namer.new()} {kind}",
                "kind": kind,
                "city": rng.choice(world.cities)["name"],
                "organizer": organizer["name"],
                "year": organizer["born"] + rng.randint(25, 55),
                "n": rng.randint(2, 9),
            }
        )
    return world


# -- documents -----------------------------------------------------------------------------------
def article(profession: str) -> str:
    return "an" if profession[0] in "aeiou" else "a"


def documents(world: World, rng: random.Random) -> list[dict]:
    docs = []

    def add(kind: str, name: str, text: str) -> str:
        doc_id = f"{kind}-{slug(name)}"
        docs.append({"id": doc_id, "title": name, "text": text})
        return doc_id

    for country in world.countries:
        country["id"] = add(
            "country",
            country["name"],
            f"{country['name']} is a country whose capital is {country['capital']}. Its currency "
            f"is the {country['currency']}. It borders {country['neighbor']} to the east. It is "
            f"divided into {rng.randint(4, 12)} provinces, and {country['name']} has its own "
            "parliament.",
        )
    for city in world.cities:
        capital = (
            f" It is the capital of {city['country']}."
            if any(c["capital"] == city["name"] for c in world.countries)
            else ""
        )
        city["id"] = add(
            "city",
            city["name"],
            f"{city['name']} is a city in {city['country']}, on the river {city['river']}. It was "
            f"founded in {city['founded']} and is known for {city['trait']}.{capital}",
        )
    for person in world.people:
        pronoun, name = person["pronoun"], person["name"]
        objective = {"she": "her", "he": "him"}[pronoun]
        text = (
            f"{name} ({person['born']}-{person['died']}) was {article(person['profession'])} "
            f"{person['profession']} born in {person['city']}."
        )
        if person["mentor"]:
            text += f" {pronoun.capitalize()} studied under {person['mentor']}."
        if person["moved"]:
            text += f" {pronoun.capitalize()} later moved to {person['moved']}."
        filler = rng.choice(FILLER_PERSON)
        text += " " + filler.format(Pronoun=pronoun.capitalize(), object=objective)
        person["id"] = add("person", name, text)
    for company in world.companies:
        text = (
            f"{company['name']} is {article(company['industry'])} {company['industry']} company "
            f"headquartered in {company['hq']}. It was founded in {company['founded']} by "
            f"{company['founder']}."
        )
        if company["branch"]:
            text += f" It later opened a branch in {company['branch']}."
        text += " " + rng.choice(FILLER_COMPANY).format(n=rng.randint(2, 9))
        company["id"] = add("company", company["name"], text)
    for landmark in world.landmarks:
        noun, fillers = LANDMARKS[landmark["kind"]]
        text = (
            f"The {landmark['name']} is a {landmark['material']} {noun} in {landmark['city']}. "
            f"It was built by {landmark['builder']} and completed in {landmark['year']}. "
            + rng.choice(fillers).format(n=landmark["n"])
        )
        landmark["id"] = add("landmark", landmark["name"], text)
    for event in world.events:
        text = (
            f"The {event['name']} was {EVENTS[event['kind']]} held in {event['city']} in "
            f"{event['year']}. It was organized by {event['organizer']}. "
            + rng.choice(FILLER_EVENT).format(n=event["n"])
        )
        event["id"] = add("event", event["name"], text)
    return docs


# -- questions -----------------------------------------------------------------------------------
def hop(entity: dict, finds: str) -> dict:
    return {"query": entity["name"], "doc": entity["id"], "finds": str(finds)}


def questions(world: World, rng: random.Random) -> list[dict]:
    by = {
        kind: {e["name"]: e for e in getattr(world, kind)}
        for kind in ("countries", "cities", "people", "companies")
    }
    city, person, company, country = (
        by["cities"], by["people"], by["companies"], by["countries"],
    )  # fmt: skip

    def landmark_founder_city(lm):
        c = company[lm["builder"]]
        p = person[c["founder"]]
        return (
            f"In which city was the founder of the company that built the {lm['name']} born?",
            [hop(lm, c["name"]), hop(c, p["name"]), hop(p, p["city"])],
        )

    def landmark_hq_country(lm):
        c = company[lm["builder"]]
        hq = city[c["hq"]]
        return (
            f"In which country is the company that built the {lm['name']} headquartered?",
            [hop(lm, c["name"]), hop(c, hq["name"]), hop(hq, hq["country"])],
        )

    def landmark_country(lm):
        where = city[lm["city"]]
        return (
            f"In which country is the {lm['name']}?",
            [hop(lm, where["name"]), hop(where, where["country"])],
        )

    def landmark_company_year(lm):
        c = company[lm["builder"]]
        return (
            f"In what year was the company that built the {lm['name']} founded?",
            [hop(lm, c["name"]), hop(c, c["founded"])],
        )

    def event_organizer_city(ev):
        p = person[ev["organizer"]]
        return (
            f"In which city was the organizer of the {ev['name']} born?",
            [hop(ev, p["name"]), hop(p, p["city"])],
        )

    def event_capital(ev):
        where = city[ev["city"]]
        land = country[where["country"]]
        return (
            f"What is the capital of the country where the {ev['name']} was held?",
            [hop(ev, where["name"]), hop(where, land["name"]), hop(land, land["capital"])],
        )

    def company_founder_profession(c):
        p = person[c["founder"]]
        return (
            f"What was the profession of the founder of {c['name']}?",
            [hop(c, p["name"]), hop(p, p["profession"])],
        )

    def company_founder_teacher(c):
        p = person[c["founder"]]
        return (
            f"Who was the teacher of the founder of {c['name']}?",
            [hop(c, p["name"]), hop(p, p["mentor"])],
        )

    def person_birthplace_river(p):
        where = city[p["city"]]
        return (
            f"On which river is the city where {p['name']} was born?",
            [hop(p, where["name"]), hop(where, where["river"])],
        )

    founders_with_teacher = [c for c in world.companies if person[c["founder"]]["mentor"]]
    plan = [
        ("landmark_founder_city", landmark_founder_city, world.landmarks),
        ("landmark_hq_country", landmark_hq_country, world.landmarks),
        ("landmark_country", landmark_country, world.landmarks),
        ("landmark_company_year", landmark_company_year, world.landmarks),
        ("event_organizer_city", event_organizer_city, world.events),
        ("event_capital", event_capital, world.events),
        ("company_founder_profession", company_founder_profession, world.companies),
        ("company_founder_teacher", company_founder_teacher, founders_with_teacher),
        ("person_birthplace_river", person_birthplace_river, world.people),
    ]
    rows = []
    for kind, make, anchors in plan:
        for anchor in rng.sample(anchors, min(QUESTIONS_PER_TYPE, len(anchors))):
            question, hops = make(anchor)
            rows.append(
                {
                    "question": question,
                    "answer": hops[-1]["finds"],
                    "type": kind,
                    "hops": hops,
                    "supporting_docs": [h["doc"] for h in hops],
                }
            )
    rng.shuffle(rows)
    return [{"id": f"sqa-{i:04d}", **row} for i, row in enumerate(rows)]


def build(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """The corpus documents and the questions."""
    rng = random.Random(seed)
    world = build_world(rng)
    docs = documents(world, rng)
    return docs, questions(world, rng)


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {path} ({len(rows)} rows)")


def main() -> None:
    docs, rows = build()
    write(DATA / "search_qa_corpus.jsonl", docs)
    write(DATA / "search_qa.jsonl", rows)


if __name__ == "__main__":
    main()
