"""sentences: toy English from a small generative grammar, for language modelling.

    S        -> Clause[n]                              (n: singular or plural)
              | Clause[n] . Pronoun[n] VP[n]           coreference: "it" or "they" as the subject was
              | NP[n] Copula[n] Adj , (not | so) Adj'  semantic: not + the antonym, so + a synonym
    Clause[n]-> NP[n] VP[n]
    NP[n]    -> Det[n] (Adj) Noun[n] (PP | that VP[n])
    VP[n]    -> Verb_intransitive[n] (PP) | Verb_transitive[n] NP (PP)
    PP       -> Prep NP

Three relations decide a word from an earlier one, and each is an alignment pattern that a
head may take up (a query that predicts the word, reading the word that decides it):
- "subject": verbs in the present tense, and the copula, agree with their subject ("the
  cat sleeps", "the cats sleep"; past-tense verbs do not: "the cat sat on the mat"). The
  subject may lie several words back, across a relative clause.
- "coreference": the pronoun after "." refers to the first clause's subject: "the dogs
  that see the cat slept . they run" -- "they", because of "dogs", not of "cat".
- "semantic": the last adjective is the first one's antonym after "not" and its synonym
  after "so": "the cat is big , not small", "the dogs are happy , so glad".
`minimal_pairs` makes, for each, prompts that differ only in the word that decides;
`Sentences.held_out_pairs` keeps those that begin no training sentence.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Set
from functools import cache, cached_property

from tinytf.config import TaskConfig
from tinytf.errors import ConfigError, UserError
from tinytf.lazy import torch
from tinytf.tasks.base import LanguageModelTask, MinimalPair, Pairs
from tinytf.tasks.vocab import BOS, EOS, PAD, PAD_ID, SPECIALS, Vocabulary

DETERMINERS = {"sg": ["the", "a", "every", "this"], "pl": ["the", "some", "these", "many"]}
NOUNS = {
    "sg": ["cat", "dog", "mat", "bird", "child", "teacher", "ball", "tree", "house", "fox"],
    "pl": ["cats", "dogs", "mats", "birds", "children", "teachers", "balls", "trees", "houses", "foxes"],
}
ADJECTIVES = ["big", "small", "old", "happy", "red", "quiet", "lazy"]
INTRANSITIVE = {
    "sg": ["sleeps", "runs", "sits", "waits"],
    "pl": ["sleep", "run", "sit", "wait"],
    "past": ["sat", "slept", "ran", "waited"],
}
TRANSITIVE = {
    "sg": ["sees", "likes", "chases", "finds"],
    "pl": ["see", "like", "chase", "find"],
    "past": ["saw", "liked", "chased", "found"],
}
PREPOSITIONS = ["on", "under", "near", "behind", "with"]
PRONOUNS = {"sg": "it", "pl": "they"}
COPULA = {"sg": "is", "pl": "are"}
OPPOSITES = [("big", "small"), ("happy", "sad"), ("fast", "slow"), ("old", "young"), ("loud", "quiet")]
ANTONYMS = {**dict(OPPOSITES), **{second: first for first, second in OPPOSITES}}
SYNONYMS = {
    "big": "large",
    "small": "little",
    "happy": "glad",
    "sad": "unhappy",
    "fast": "quick",
    "slow": "sluggish",
    "old": "aged",
    "young": "youthful",
    "loud": "noisy",
    "quiet": "silent",
}
SEMANTIC = {"not": ANTONYMS, "so": SYNONYMS}  # the word before the answer -> the relation
HELD_OUT_ADJECTIVES = 3  # of the 10, for each noun: see `held_out_adjectives`
COREFERENCE_SHARE, SEMANTIC_SHARE = 0.25, 0.25  # of the grammar's sentences
NOUN_INDEX = {word: index for words in NOUNS.values() for index, word in enumerate(words)}
NOUN_WORDS = frozenset(NOUN_INDEX)
SUBJECT_WORDS = NOUN_WORDS | set(PRONOUNS.values())
VERB_WORDS = frozenset(
    [*COPULA.values(), *(word for forms in (INTRANSITIVE, TRANSITIVE) for words in forms.values() for word in words)]
)
POOL_SIZE = 20_000  # sentences generated once; batches are drawn from them
POOL_SEED = 1234  # the grammar's sample is part of the task's definition, like its vocabulary


def all_words() -> list[str]:
    groups = [*DETERMINERS.values(), *NOUNS.values(), ADJECTIVES, *INTRANSITIVE.values()]
    groups += [*TRANSITIVE.values(), PREPOSITIONS, ["that"], [".", *PRONOUNS.values()]]
    groups += [COPULA.values(), ANTONYMS, [",", *SEMANTIC], SYNONYMS.values()]
    return list(dict.fromkeys(word for group in groups for word in group))


def held_out_adjectives(noun: str) -> list[str]:
    """The first adjectives that training sentences never give `noun` (of either number) in
    the semantic construction, a different few for each noun: semantic minimal pairs drawn
    from them begin no training sentence, so they test the relation, not memory."""
    adjectives = list(ANTONYMS)
    return [adjectives[(NOUN_INDEX[noun] + k) % len(adjectives)] for k in range(HELD_OUT_ADJECTIVES)]


@cache
def training_adjectives(noun: str) -> tuple[str, ...]:
    """The first adjectives training sentences may give `noun`: all but its held-out ones."""
    return tuple(word for word in ANTONYMS if word not in held_out_adjectives(noun))


def sentence_words(tokens: list[str]) -> list[list[list[tuple[int, str]]]]:
    """Tokens -> the sentences in them, each a list of its clauses, each a list of (index in
    tokens, word): <bos>, <sep> and <eos> end a sentence, "." a clause; <pad> is skipped."""
    sentences: list[list[list[tuple[int, str]]]] = [[[]]]
    for index, token in enumerate(tokens):
        if token == PAD:
            continue
        if token in SPECIALS:
            sentences.append([[]])
        elif token == ".":
            sentences[-1].append([])
        else:
            sentences[-1][-1].append((index, token))
    return [[clause for clause in sentence if clause] for sentence in sentences if any(sentence)]


def antecedents(sentence: list[list[tuple[int, str]]]) -> list[tuple[int, int]]:
    """(pronoun index, antecedent index): a clause that starts with a pronoun refers to the
    subject of the clause before it, its first noun."""
    pairs = []
    for before, clause in itertools.pairwise(sentence):
        subject = next((index for index, word in before if word in NOUN_WORDS), None)
        if clause[0][1] in PRONOUNS.values() and subject is not None:
            pairs.append((clause[0][0], subject))
    return pairs


def related_words(clause: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(second adjective index, first adjective index) of "ADJ , not|so ADJ'"."""
    return [
        (clause[k + 1][0], clause[k - 2][0])
        for k in range(2, len(clause) - 1)
        if clause[k][1] in SEMANTIC and clause[k - 1][1] == "," and clause[k - 2][1] in ANTONYMS
    ]


def verb_subjects(sentence: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(verb index, subject index) for the verbs of one clause of (index, word).

    In the grammar every verb starts a VP, and a VP is either a relative clause "that VP"
    right after the noun it describes -- its subject -- or the sentence's main VP, whose
    subject is the head noun of the first NP (or the pronoun): the clause's first. A verb in no such
    place (typed text off the grammar) gets no subject."""
    first_noun = next((index for index, word in sentence if word in SUBJECT_WORDS), None)
    pairs = []
    for k, (verb, word) in enumerate(sentence):
        if word not in VERB_WORDS:
            continue
        if k >= 1 and sentence[k - 1][1] == "that":  # noun that VERB
            if k >= 2 and sentence[k - 2][1] in NOUN_WORDS:
                pairs.append((verb, sentence[k - 2][0]))
        elif first_noun is not None and first_noun < verb:
            pairs.append((verb, first_noun))
    return pairs


class Grammar:
    """Draws sentences from the grammar above with a seeded `random.Random`."""

    def __init__(self, rng: random.Random, max_depth: int = 2) -> None:
        self.rng = rng
        self.max_depth = max_depth

    def sentence(self) -> list[str]:
        number = self.rng.choice(["sg", "pl"])
        clause = self.noun_phrase(number, depth=0)
        roll = self.rng.random()
        if roll < SEMANTIC_SHARE:
            subject = next(word for word in clause if word in NOUN_WORDS)
            first = self.rng.choice(training_adjectives(subject))
            link = self.rng.choice(list(SEMANTIC))
            return [*clause, COPULA[number], first, ",", link, SEMANTIC[link][first]]
        clause += self.verb_phrase(number, depth=0)
        if roll < SEMANTIC_SHARE + COREFERENCE_SHARE:
            return [*clause, ".", PRONOUNS[number], *self.verb_phrase(number, depth=self.max_depth)]
        return clause

    def noun_phrase(self, number: str, depth: int) -> list[str]:
        words = [self.rng.choice(DETERMINERS[number])]
        if self.rng.random() < 0.3:
            words.append(self.rng.choice(ADJECTIVES))
        words.append(self.rng.choice(NOUNS[number]))
        if depth < self.max_depth:
            roll = self.rng.random()
            if roll < 0.15:
                words += self.prepositional_phrase(depth + 1)
            elif roll < 0.3:
                words += ["that", *self.verb_phrase(number, depth + 1)]
        return words

    def verb_phrase(self, number: str, depth: int) -> list[str]:
        tense = number if self.rng.random() < 0.6 else "past"
        if self.rng.random() < 0.5:
            words = [self.rng.choice(INTRANSITIVE[tense])]
        else:
            words = [self.rng.choice(TRANSITIVE[tense]), *self.noun_phrase(self.rng.choice(["sg", "pl"]), depth + 1)]
        if depth < self.max_depth and self.rng.random() < 0.4:
            words += self.prepositional_phrase(depth + 1)
        return words

    def prepositional_phrase(self, depth: int) -> list[str]:
        return [self.rng.choice(PREPOSITIONS), *self.noun_phrase(self.rng.choice(["sg", "pl"]), depth)]


def minimal_pairs(
    construction: str, n: int, seed: int = 0, seen: Set[tuple[str, ...]] = frozenset()
) -> list[MinimalPair]:
    """`n` minimal pairs of `construction` ("subject", "coreference" or "semantic"), drawn
    with `seed`: prompts of the grammar, the same length, that differ in one word (the
    subject's number, the antecedent's number, the first adjective) and so in the answer.
    A pair whose clean or corrupted prompt, followed by its answer, is in `seen` is skipped."""
    if construction not in CONSTRUCTIONS:
        raise ValueError(f"construction {construction!r}: one of {', '.join(CONSTRUCTIONS)}")
    rng = random.Random(seed)
    pairs: list[MinimalPair] = []
    for _ in range(100 * n):
        if len(pairs) == n:
            break
        pair = CONSTRUCTIONS[construction](rng)
        sentences = ((*pair.clean.split(), pair.answer), (*pair.corrupt.split(), pair.wrong))
        if not any(words in seen for words in sentences):
            pairs.append(pair)
    if len(pairs) < n:
        raise UserError(f"too few {construction} pairs are unseen in training: found {len(pairs)} of {n}")
    return pairs


def _subject_pair(rng: random.Random) -> MinimalPair:
    """The subject's number decides the verb's, past a noun of either number."""
    number, other = rng.sample(["sg", "pl"], 2)
    noun, verb = rng.randrange(len(NOUNS["sg"])), rng.randrange(len(INTRANSITIVE["sg"]))
    rest = [rng.choice(PREPOSITIONS), "the", rng.choice(NOUNS[rng.choice(["sg", "pl"])])]
    return MinimalPair(
        " ".join(["the", NOUNS[number][noun], *rest]),
        " ".join(["the", NOUNS[other][noun], *rest]),
        INTRANSITIVE[number][verb],
        INTRANSITIVE[other][verb],
    )


def _coreference_pair(rng: random.Random) -> MinimalPair:
    """The first clause's subject decides the pronoun; its verb is in the past tense, which
    says nothing of the number."""
    number, other = rng.sample(["sg", "pl"], 2)
    noun = rng.randrange(len(NOUNS["sg"]))
    if rng.random() < 0.5:  # (an adjective, so that both kinds of prompt have one length)
        middle = [rng.choice(PREPOSITIONS), "the", rng.choice(ADJECTIVES), rng.choice(NOUNS[rng.choice(["sg", "pl"])])]
    else:
        middle = ["that", rng.choice(TRANSITIVE["past"]), "the", rng.choice(NOUNS[rng.choice(["sg", "pl"])])]
    rest = [*middle, rng.choice(INTRANSITIVE["past"]), "."]
    return MinimalPair(
        " ".join(["the", NOUNS[number][noun], *rest]),
        " ".join(["the", NOUNS[other][noun], *rest]),
        PRONOUNS[number],
        PRONOUNS[other],
    )


def _semantic_pair(rng: random.Random) -> MinimalPair:
    """The first adjective decides the second: its antonym after "not", a synonym after "so"."""
    number, link = rng.choice(["sg", "pl"]), rng.choice(list(SEMANTIC))
    noun = rng.choice(NOUNS[number])
    # Two first words never given to this noun in training; distinct, so their answers are too
    first, second = rng.sample(held_out_adjectives(noun), 2)
    start = [rng.choice(DETERMINERS[number]), noun, COPULA[number]]
    return MinimalPair(
        " ".join([*start, first, ",", link]),
        " ".join([*start, second, ",", link]),
        SEMANTIC[link][first],
        SEMANTIC[link][second],
    )


CONSTRUCTIONS = {"subject": _subject_pair, "coreference": _coreference_pair, "semantic": _semantic_pair}


class Sentences(LanguageModelTask):
    name = "sentences"
    description = "next-word prediction on toy English: verbs agree, pronouns refer back, not + antonym, so + synonym"
    config_keys = ("min_len", "max_len")  # sentence lengths, in words
    starts_with_bos = True
    showcase = "the cat sat on the mat"
    alignment_patterns = ("subject", "coreference", "semantic")
    constructions = tuple(CONSTRUCTIONS)

    @classmethod
    def example(cls) -> str:
        """A sentence of each kind: its first of the pool with a pronoun, with "not" or "so", with neither."""
        task = cls(TaskConfig(name=cls.name, min_len=4, max_len=10))
        sentences = [task.render(task.pool.example(i)[1]).split() for i in range(100)]
        kinds = [
            next(words for words in sentences if "." in words),
            next(words for words in sentences if SEMANTIC.keys() & set(words)),
            next(words for words in sentences if "." not in words and not SEMANTIC.keys() & set(words)),
        ]
        return "  |  ".join(" ".join(words) for words in kinds)

    def build_vocab(self) -> Vocabulary:
        return Vocabulary(all_words(), split="word")

    @property
    def max_target_len(self) -> int:
        return self.config.max_len + 2  # <bos> words <eos>

    @cached_property
    def pool(self) -> Pairs:
        """POOL_SIZE sentences of min_len..max_len words, as <bos> words <eos>."""
        if missing := [word for word in all_words() if word not in self.vocab.ids]:
            some = ", ".join(map(repr, missing[:4])) + ("..." if len(missing) > 4 else "")
            raise UserError(
                f"this vocabulary lacks words of the sentences grammar ({some}): "
                "the run was trained on an older grammar; train it again"
            )
        grammar = Grammar(random.Random(POOL_SEED))
        width = self.max_target_len
        target = torch.full((POOL_SIZE, width), PAD_ID)
        lengths = torch.empty(POOL_SIZE, dtype=torch.long)
        made = 0
        for _ in range(100 * POOL_SIZE):
            words = grammar.sentence()
            if self.config.min_len <= len(words) <= self.config.max_len:
                ids = self.vocab.encode([BOS, *words, EOS])
                target[made, : len(ids)] = torch.tensor(ids)
                lengths[made] = len(ids)
                made += 1
                if made == POOL_SIZE:
                    break
        if made == 0:
            raise ConfigError(
                f"task.min_len={self.config.min_len}, task.max_len={self.config.max_len}: "
                "no sentence of the grammar has that many words (they have 3 to about 30)"
            )
        return Pairs.without_source(target[:made], lengths[:made])

    @cached_property
    def seen(self) -> frozenset[tuple[str, ...]]:
        """Every beginning of a training sentence, as words: what `held_out_pairs` avoids."""
        rows = zip(self.pool.target.tolist(), self.pool.target_len.tolist(), strict=True)
        sentences = (self.vocab.decode(ids[1 : length - 1]) for ids, length in rows)  # without <bos>, <eos>
        return frozenset(tuple(words[:k]) for words in sentences for k in range(1, len(words) + 1))

    def draw_pairs(self, construction: str, n: int, seed: int, held_out: Pairs | None) -> list[MinimalPair]:
        """`minimal_pairs` that begin no training sentence, clean or corrupted, with their
        answers (drawn from the grammar: `held_out` is not needed)."""
        return minimal_pairs(construction, n, seed, seen=self.seen)

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """ "subject": to predict a verb, read its subject (`verb_subjects`); "coreference": to
        predict a pronoun, read its antecedent (`antecedents`); "semantic": to predict the
        second adjective, read the first (`related_words`). Indices are positions in `target`,
        <bos> included."""
        found: dict[str, list[tuple[int, int]]] = {pattern: [] for pattern in self.alignment_patterns}
        for sentence in sentence_words(self.vocab.decode(target)):
            found["coreference"] += antecedents(sentence)
            for clause in sentence:
                found["subject"] += verb_subjects(clause)
                found["semantic"] += related_words(clause)
        return found

    def draw(self, n: int, generator: torch.Generator) -> Pairs:
        return self.pool[torch.randint(0, len(self.pool), (n,), generator=generator)]
