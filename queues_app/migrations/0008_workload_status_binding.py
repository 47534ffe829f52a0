# A workload is Binding (not Running) until the cluster confirms its gang's binds.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('queues_app', '0007_autoscaling'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='workload',
            name='workload_status_valid',
        ),
        migrations.AlterField(
            model_name='workload',
            name='status',
            field=models.CharField(choices=[('Pending', 'Pending'), ('Binding', 'Binding'), ('Running', 'Running'), ('Releasing', 'Releasing'), ('Succeeded', 'Succeeded'), ('Failed', 'Failed'), ('Cancelled', 'Cancelled')], db_index=True, default='Pending', max_length=16),
        ),
        migrations.AddConstraint(
            model_name='workload',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['Pending', 'Binding', 'Running', 'Releasing', 'Succeeded', 'Failed', 'Cancelled'])), name='workload_status_valid'),
        ),
    ]
