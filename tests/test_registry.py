"""The one registry every named kind uses (attacks, methods, protocols, OOD sets, subsets)."""
import pytest

from timm_advnorm.registry import Registry


def test_registers_finds_and_lists_in_registration_order():
    registry = Registry('protocol')
    registry.register('b', 2)
    assert registry.register('a', 1) == 1
    assert registry.get('a') == 1
    assert registry.names() == ['b', 'a'] and list(registry) == ['b', 'a']
    assert 'a' in registry and 'c' not in registry and len(registry) == 2


def test_sorted_registry_lists_names_sorted():
    registry = Registry('attack', sort_names=True)
    for name in ('pgd', 'apgd-ce', 'fgsm'):
        registry.register(name, name.upper())
    assert registry.names() == ['apgd-ce', 'fgsm', 'pgd']


def test_unknown_name_lists_the_known_ones():
    registry = Registry('method')
    registry.register('vanilla', 0)
    registry.register('mbn', 1)
    with pytest.raises(ValueError, match=r"^Unknown method 'mixd'; available: vanilla, mbn\.$"):
        registry.get('mixd')


def test_name_taken_twice_is_refused_and_the_first_kept():
    registry = Registry('attack')
    registry.register('pgd', 1)
    with pytest.raises(ValueError, match="Attack 'pgd' is registered twice"):
        registry.register('pgd', 2)
    assert registry.get('pgd') == 1


def test_names_must_match_the_pattern():
    registry = Registry('method', name_pattern=r'[a-z][a-z0-9_]*', name_rule='lower case letters')
    with pytest.raises(ValueError, match=r"^Method name 'Fast-AdvProp': use lower case letters\.$"):
        registry.register('Fast-AdvProp', 1)
    with pytest.raises(ValueError, match=r"^Attack name 'PGD': use a name matching \[a-z-\]\+\.$"):
        Registry('attack', name_pattern='[a-z-]+').register('PGD', 1)
    with pytest.raises(ValueError, match=r"^Subset name '': use a non-empty name\.$"):
        Registry('subset').register('', 1)


def test_entries_view_is_read_only_and_follows_the_registry():
    registry = Registry('subset')
    view = registry.entries
    registry.register('robustbench-5000', 'files')
    assert dict(view) == {'robustbench-5000': 'files'}
    with pytest.raises(TypeError):
        view['other'] = 'x'


def test_unregister_returns_the_entry_and_refuses_unknown_names():
    registry = Registry('method')
    registry.register('toy', 3)
    assert registry.unregister('toy') == 3 and 'toy' not in registry
    with pytest.raises(ValueError, match="Unknown method 'toy'"):
        registry.unregister('toy')
