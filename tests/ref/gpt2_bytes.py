"""tests/ref/gpt2_bytes.py: GPT-2's byte-level alphabet (standard library only), shared by the
generation tests (tokenizer files they write) and bench/generate/make_hf_dir.py."""


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the alphabet of byte-level BPE vocabularies)"""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) +
          list(range(ord("\xae"), ord("\xff") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
