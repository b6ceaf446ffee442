"""sentences: toy English from a small generative grammar, for language modelling.

    S        -> NP[n] VP[n]                       (n: singular or plural, agreeing)
    NP[n]    -> Det[n] (Adj) Noun[n] (PP | that VP[n])
    VP[n]    -> Verb_intransitive[n] (PP) | Verb_transitive[n] NP (PP)
    PP       -> Prep NP

Verbs in the present tense agree with their subject ("the cat sleeps", "the cats
sleep"); past-tense verbs do not ("the cat sat on the mat"). A language model has to
find the subject -- sometimes several words back, across a relative clause -- to pick
the verb's form: a head that attends from the verb to its subject is worth looking for
(the alignment pattern "subject": to predict a verb, read its subject noun).
"""

from __future__ import annotations

import random
from functools import cached_property

from tinytf.errors import ConfigError
from tinytf.lazy import torch
from tinytf.tasks.base import LanguageModelTask, Pairs
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
NOUN_WORDS = frozenset(word for words in NOUNS.values() for word in words)
VERB_WORDS = frozenset(word for forms in (INTRANSITIVE, TRANSITIVE) for words in forms.values() for word in words)
POOL_SIZE = 20_000  # sentences generated once; batches are drawn from them
POOL_SEED = 1234  # the grammar's sample is part of the task's definition, like its vocabulary


def all_words() -> list[str]:
    groups = [*DETERMINERS.values(), *NOUNS.values(), ADJECTIVES, *INTRANSITIVE.values()]
    groups += [*TRANSITIVE.values(), PREPOSITIONS, ["that"]]
    return list(dict.fromkeys(word for group in groups for word in group))


def sentence_words(tokens: list[str]) -> list[list[tuple[int, str]]]:
    """Tokens -> the sentences in them, each a list of (index in tokens, word): <bos>,
    <sep> and <eos> end a sentence, <pad> is skipped."""
    sentences: list[list[tuple[int, str]]] = [[]]
    for index, token in enumerate(tokens):
        if token == PAD:
            continue
        if token in SPECIALS:
            sentences.append([])
        else:
            sentences[-1].append((index, token))
    return [sentence for sentence in sentences if sentence]


def verb_subjects(sentence: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """(verb index, subject index) for the verbs of one sentence of (index, word).

    In the grammar every verb starts a VP, and a VP is either a relative clause "that VP"
    right after the noun it describes -- its subject -- or the sentence's main VP, whose
    subject is the head noun of the first NP: the sentence's first noun. A verb in no such
    place (typed text off the grammar) gets no subject."""
    first_noun = next((index for index, word in sentence if word in NOUN_WORDS), None)
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
        return self.noun_phrase(number, depth=0) + self.verb_phrase(number, depth=0)

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


class Sentences(LanguageModelTask):
    name = "sentences"
    description = "next-word prediction on toy English with subject-verb agreement: the cat sat on the mat"
    config_keys = ("min_len", "max_len")  # sentence lengths, in words
    starts_with_bos = True
    showcase = "the cat sat on the mat"
    alignment_patterns = ("subject",)

    def build_vocab(self) -> Vocabulary:
        return Vocabulary(all_words(), split="word")

    @property
    def max_target_len(self) -> int:
        return self.config.max_len + 2  # <bos> words <eos>

    @cached_property
    def pool(self) -> Pairs:
        """POOL_SIZE sentences of min_len..max_len words, as <bos> words <eos>."""
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

    def alignments(self, source: list[int], target: list[int]) -> dict[str, list[tuple[int, int]]]:
        """One pattern, "subject": to predict a verb (whose form agrees with its subject),
        read the subject noun; see `verb_subjects`. Indices are positions in `target`, <bos> included."""
        tokens = self.vocab.decode(target)
        return {"subject": [pair for sentence in sentence_words(tokens) for pair in verb_subjects(sentence)]}

    def sample(self, n: int, generator: torch.Generator) -> Pairs:
        return self.pool[torch.randint(0, len(self.pool), (n,), generator=generator)]
